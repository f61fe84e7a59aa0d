// SentencePiece-style tokenizer (GGUF model "llama": Llama 1/2, Mistral v1,
// Phi-3, Baichuan, TinyStories). Spaces become U+2581 "▁", the text is split
// into UTF-8 characters, and adjacent pieces are merged greedily, highest
// vocabulary score first, while the merged text is itself a token. Characters
// that end up as no token are emitted as byte tokens <0xNN>.
#include <queue>

#include "text/tokenizer_vocab.h"
#include "text/unicode_util.h"

namespace spool {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab) : VocabTokenizer(std::move(vocab)) {
    for (int b = 0; b < 256; ++b) byte_token_[b] = find_byte_token(static_cast<uint8_t>(b));
  }

 protected:
  void encode_raw(std::string_view raw, bool after_special, std::vector<int32_t>& out) const override;

  std::string normal_piece(int32_t id) const override {
    const std::string& t = vocab_.text[id];
    std::string s;
    s.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
        s.push_back(' ');
        i += kSpaceMarker.size();
      } else {
        s.push_back(t[i++]);
      }
    }
    return s;
  }

 private:
  // A piece of the text being merged: a span of `text`, linked to its neighbours.
  struct Symbol {
    int prev, next;
    size_t start, len;
  };
  // A candidate merge of symbols[left] with the symbol after it.
  struct Bigram {
    int left, right;
    float score;
    size_t len;  // bytes of the merged text, to detect stale entries
    bool operator<(const Bigram& o) const {  // priority: higher score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };

  int32_t find_byte_token(uint8_t b) const {
    static const char* hex = "0123456789ABCDEF";
    const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
    int32_t id = vocab_.find(name);
    if (id < 0) id = vocab_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    return id;
  }

  void try_add(const std::string& text, const std::vector<Symbol>& syms, int left,
               std::priority_queue<Bigram>& queue) const {
    if (left < 0 || syms[left].next < 0) return;
    const Symbol& l = syms[left];
    const Symbol& r = syms[l.next];
    const size_t len = l.len + r.len;
    const int32_t id = vocab_.find(std::string_view(text).substr(l.start, len));
    if (id < 0) return;
    queue.push({left, l.next, vocab_.score[id], len});
  }

  int32_t byte_token_[256];
};

void SpmTokenizer::encode_raw(std::string_view raw, bool after_special, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(raw.size() + 8);
  if (vocab_.add_space_prefix && after_special) text += kSpaceMarker;
  for (char c : raw) {
    if (c == ' ') text += kSpaceMarker;
    else text.push_back(c);
  }
  if (text.empty()) return;

  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min(unicode::utf8_seq_len(static_cast<unsigned char>(text[pos])), text.size() - pos);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, pos + len < text.size() ? idx + 1 : -1, pos, len});
    pos += len;
  }

  std::priority_queue<Bigram> queue;
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) try_add(text, syms, i, queue);
  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = syms[bg.left];
    Symbol& r = syms[bg.right];
    // Symbols only grow, so a changed length means this entry is stale.
    if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = bg.left;
    try_add(text, syms, l.prev, queue);
    try_add(text, syms, bg.left, queue);
  }

  for (int i = 0; i != -1; i = syms[i].next) {
    const Symbol& s = syms[i];
    const int32_t id = vocab_.find(std::string_view(text).substr(s.start, s.len));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Byte fallback; a vocabulary without byte tokens gets <unk> instead.
    for (size_t j = 0; j < s.len; ++j) {
      const int32_t b = byte_token_[static_cast<unsigned char>(text[s.start + j])];
      if (b >= 0) out.push_back(b);
      else if (vocab_.unk >= 0) out.push_back(vocab_.unk);
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab) {
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace spool
