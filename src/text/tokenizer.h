// Tokenizer interface and factory. Implementations: SentencePiece-style
// (GGUF tokenizer.ggml.model = "llama"), byte-level BPE ("gpt2", with the
// pre-tokenizer named by tokenizer.ggml.pre), WordPiece ("bert").
// Tokens are plain int32 ids; special/control tokens are recognised in the
// input text only when parse_special is set.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spool {
namespace gguf { struct File; }

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special: add BOS/EOS as the model's metadata says (add_bos_token / add_eos_token).
  // parse_special: text like "<|im_start|>" becomes the special token's id.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // The bytes a token stands for (byte-fallback tokens give their raw byte; control
  // tokens give "" unless render_special). Concatenate pieces to decode.
  virtual std::string token_to_piece(int32_t id, bool render_special = false) const = 0;
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  virtual int32_t n_vocab() const = 0;
  virtual int32_t bos() const = 0;  // -1 if none
  virtual int32_t eos() const = 0;  // -1 if none
  virtual bool add_bos() const = 0;
  virtual bool is_eog(int32_t id) const = 0;  // end of generation (eos, eot, eom, ...)
  virtual const std::string& token_text(int32_t id) const = 0;  // raw vocab entry
};

// Builds the tokenizer a GGUF file describes. Throws spool::Error if the
// metadata is missing, inconsistent, or names an unsupported model/pre-tokenizer.
std::unique_ptr<Tokenizer> load_tokenizer(const gguf::File& file);

}  // namespace spool
