// Byte-level BPE tokenizer (GGUF model "gpt2": GPT-2, Llama 3, Qwen, DeepSeek,
// Falcon, StarCoder, ...). Text is cut into words by the pre-tokenizer, each
// word's bytes are mapped to GPT-2's printable stand-in characters, and the
// merges of tokenizer.ggml.merges are applied lowest rank first.
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "format/gguf.h"
#include "text/pretokenizer.h"
#include "text/tokenizer_vocab.h"
#include "text/unicode_util.h"

namespace spool {

namespace {

class BpeTokenizer final : public VocabTokenizer {
 public:
  BpeTokenizer(Vocab vocab, const gguf::File& file)
      : VocabTokenizer(std::move(vocab)), pre_(vocab_.pre) {
    load_merges(file);
    // Tekken-style vocabularies take a whole word as is when it is a token.
    ignore_merges_ = vocab_.pre == "tekken";
  }

 protected:
  void encode_raw(std::string_view text, bool after_special, std::vector<int32_t>& out) const override {
    for (const std::string& word : pre_.split(text)) encode_word(word, out);
  }

  // Maps the stand-in characters back to the bytes they encode.
  std::string normal_piece(int32_t id) const override {
    const std::string& t = vocab_.text[id];
    std::string s;
    s.reserve(t.size());
    for (size_t pos = 0; pos < t.size();) {
      const size_t start = pos;
      const int b = unicode::unicode_to_byte(unicode::decode_utf8(t, pos));
      // A character outside the mapping (only in odd vocabularies) is kept as is.
      if (b >= 0) s.push_back(static_cast<char>(b));
      else s.append(t, start, pos - start);
    }
    return s;
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void load_merges(const gguf::File& file);
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  PreTokenizer pre_;
  bool ignore_merges_ = false;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
};

void BpeTokenizer::load_merges(const gguf::File& file) {
  const gguf::Value* merges = file.find("tokenizer.ggml.merges");
  if (!merges) throw Error("tokenizer: missing tokenizer.ggml.merges (required for a gpt2 tokenizer)");
  if (!merges->is_array() || merges->elem_type != gguf::ValueType::STRING)
    throw Error("tokenizer: tokenizer.ggml.merges is not a string array");
  merges_.reserve(merges->strings.size());
  for (size_t i = 0; i < merges->strings.size(); ++i) {
    const std::string& m = merges->strings[i];
    // "left right"; the search starts at 1 so a left part that is itself a
    // space (possible in non-byte-level vocabularies) still splits correctly.
    const size_t sp = m.find(' ', 1);
    auto bad = [&](const std::string& why) {
      return Error("tokenizer: tokenizer.ggml.merges[" + std::to_string(i) + "] '" + m + "' " + why);
    };
    if (sp == std::string::npos) throw bad("is not two tokens separated by a space");
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    const int32_t l = vocab_.find(left), r = vocab_.find(right);
    if (l < 0 || r < 0) throw bad("refers to a token that is not in the vocabulary");
    const int32_t result = vocab_.find(std::string(left) + std::string(right));
    if (result < 0) throw bad("produces a token that is not in the vocabulary");
    merges_.emplace(pair_key(l, r), Merge{static_cast<int32_t>(i), result});  // first rank wins
  }
}

void BpeTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  std::string encoded;
  encoded.reserve(word.size() * 2);
  for (unsigned char b : word) encoded += unicode::byte_to_unicode(b);
  if (ignore_merges_) {
    if (int32_t id = vocab_.find(encoded); id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // One symbol per stand-in character, linked list over a vector.
  struct Symbol {
    int prev, next;
    int32_t id;  // -1: a character that is no token (never merged)
    size_t start, len;
  };
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < encoded.size();) {
    const size_t len = std::min(unicode::utf8_seq_len(static_cast<unsigned char>(encoded[pos])), encoded.size() - pos);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, pos + len < encoded.size() ? idx + 1 : -1,
                    vocab_.find(std::string_view(encoded).substr(pos, len)), pos, len});
    pos += len;
  }

  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id, right_id;
    bool operator<(const Candidate& o) const {  // priority: lowest rank, then leftmost
      return rank > o.rank || (rank == o.rank && left > o.left);
    }
  };
  std::priority_queue<Candidate> queue;
  auto try_add = [&](int left) {
    if (left < 0 || syms[left].next < 0) return;
    const Symbol& l = syms[left];
    const Symbol& r = syms[l.next];
    if (l.id < 0 || r.id < 0) return;
    auto it = merges_.find(pair_key(l.id, r.id));
    if (it != merges_.end()) queue.push({it->second.rank, left, l.id, r.id});
  };
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i) try_add(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    // Stale if either side has changed since the candidate was queued.
    if (l.len == 0 || l.id != c.left_id || l.next < 0 || syms[l.next].id != c.right_id) continue;
    Symbol& r = syms[l.next];
    l.id = merges_.at(pair_key(c.left_id, c.right_id)).result;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    try_add(l.prev);
    try_add(c.left);
  }

  for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    if (syms[i].id >= 0) out.push_back(syms[i].id);
    else if (vocab_.unk >= 0) out.push_back(vocab_.unk);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab, const gguf::File& file) {
  return std::make_unique<BpeTokenizer>(std::move(vocab), file);
}

}  // namespace spool
