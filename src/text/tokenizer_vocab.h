// Internal to the tokenizers: the vocabulary every tokenizer type shares (token
// texts, scores, attributes, special ids, end-of-generation set), the
// special-token partition of input text, and the VocabTokenizer base class
// that implements the public Tokenizer interface on top of one per-type hook.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "text/tokenizer.h"

namespace spool {
namespace gguf { struct File; }

// Token attributes, a bit set (one token can be control and rstrip, say).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,  // whitespace before a parsed special token is dropped
  kAttrRstrip = 1u << 8,  // whitespace after it is dropped
};

enum class VocabType { kSpm, kBpe, kWpm };

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  VocabType type = VocabType::kSpm;
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<uint32_t> attr;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of;
  size_t max_token_len = 0;  // bytes

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  bool add_bos = false, add_eos = false, add_sep = false;
  bool add_space_prefix = false;                         // SPM: prepend " " to raw text
  bool normalize_lowercase = true, strip_accents = true;  // WPM
  std::unordered_set<int32_t> eog;
  // Control, user-defined and unknown tokens, longest text first: the order in
  // which they are cut out of input text.
  std::vector<int32_t> special_by_length;

  int32_t find(std::string_view s) const {
    auto it = id_of.find(s);
    return it == id_of.end() ? -1 : it->second;
  }
  bool valid(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(text.size()); }
};

// Reads the token list and everything around it; `type` fixes the defaults
// that llama.cpp applies when a key is absent. Throws spool::Error.
Vocab load_vocab(const gguf::File& file, VocabType type);

// A piece of input text: either raw text still to tokenize, or a special
// token found in it.
struct Fragment {
  int32_t token = -1;     // >= 0: a special token
  std::string_view text;  // raw text otherwise
};
std::vector<Fragment> partition_special(const Vocab& vocab, std::string_view text, bool parse_special);

class VocabTokenizer : public Tokenizer {
 public:
  explicit VocabTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string token_to_piece(int32_t id, bool render_special = false) const override;

  int32_t n_vocab() const override { return static_cast<int32_t>(vocab_.text.size()); }
  int32_t bos() const override { return vocab_.bos; }
  int32_t eos() const override { return vocab_.eos; }
  bool add_bos() const override { return vocab_.add_bos; }
  bool is_eog(int32_t id) const override { return vocab_.eog.count(id) != 0; }
  const std::string& token_text(int32_t id) const override;

  const Vocab& vocab() const { return vocab_; }

 protected:
  // Tokenizes one run of raw text. `after_special` is true at the start of the
  // input and right after a special token (SPM adds its space prefix there).
  virtual void encode_raw(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  // The text of a normal token as it appears in decoded output.
  virtual std::string normal_piece(int32_t id) const = 0;
  // Byte value of a byte token (<0xNN>), or -1.
  int byte_value(int32_t id) const;

  Vocab vocab_;
};

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab vocab, const gguf::File& file);
std::unique_ptr<Tokenizer> make_wpm_tokenizer(Vocab vocab);

}  // namespace spool
