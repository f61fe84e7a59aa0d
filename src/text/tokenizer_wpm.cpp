// WordPiece tokenizer (GGUF model "bert": BERT, BGE, MiniLM embedders). Text is
// normalized BERT-style (lowercase, accents stripped, controls dropped), cut at
// whitespace and punctuation, and each word is matched greedily longest-first
// against the vocabulary. GGUF stores word-initial pieces with a leading "▁"
// and continuation pieces bare, so a word is matched as "▁" + word.
#include "text/tokenizer_vocab.h"
#include "text/unicode_util.h"

namespace spool {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

// CJK ideographs are split into single characters, as BERT does.
bool is_cjk_ideograph(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class WpmTokenizer final : public VocabTokenizer {
 public:
  explicit WpmTokenizer(Vocab vocab) : VocabTokenizer(std::move(vocab)) {}

 protected:
  void encode_raw(std::string_view text, bool after_special, std::vector<int32_t>& out) const override {
    for (const std::string& word : split_words(text)) encode_word(word, out);
  }

  std::string normal_piece(int32_t id) const override {
    const std::string& t = vocab_.text[id];
    if (t.compare(0, kSpaceMarker.size(), kSpaceMarker) == 0) return " " + t.substr(kSpaceMarker.size());
    return t;
  }

 private:
  std::vector<std::string> split_words(std::string_view text) const;
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
};

std::vector<std::string> WpmTokenizer::split_words(std::string_view text) const {
  std::vector<uint32_t> cpts;
  if (vocab_.strip_accents) {
    for (uint32_t c : unicode::decode_utf8(text)) unicode::append_nfd(cpts, c);
  } else {
    cpts = unicode::decode_utf8(text);
  }
  std::vector<std::string> words(1);
  auto finish_word = [&] {
    if (!words.back().empty()) words.emplace_back();
  };
  for (uint32_t c : cpts) {
    if (unicode::is_whitespace(c)) {
      finish_word();
      continue;
    }
    if (c == 0 || c == unicode::kReplacement || unicode::is_control(c)) continue;
    if (vocab_.strip_accents && unicode::is_mark(c)) continue;
    const uint32_t lc = vocab_.normalize_lowercase ? unicode::to_lower(c) : c;
    if (unicode::is_punct(c) || (c < 0x7F && unicode::is_symbol(c)) || is_cjk_ideograph(c)) {
      finish_word();
      unicode::append_utf8(words.back(), lc);  // a word of its own
      words.emplace_back();
    } else {
      unicode::append_utf8(words.back(), lc);
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WpmTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  const std::string text = std::string(kSpaceMarker) + word;
  const size_t n = text.size();
  const size_t first = out.size();
  for (size_t i = 0; i < n;) {
    // Longest vocabulary entry starting at byte i.
    size_t j = std::min(n, i + vocab_.max_token_len);
    int32_t id = -1;
    for (; j > i; --j) {
      id = vocab_.find(std::string_view(text).substr(i, j - i));
      if (id >= 0) break;
    }
    if (id < 0) {
      // Any unmatched part makes the whole word unknown.
      out.resize(first);
      break;
    }
    out.push_back(id);
    i = j;
  }
  if (out.size() == first && vocab_.unk >= 0) out.push_back(vocab_.unk);
}

}  // namespace

std::unique_ptr<Tokenizer> make_wpm_tokenizer(Vocab vocab) {
  return std::make_unique<WpmTokenizer>(std::move(vocab));
}

}  // namespace spool
