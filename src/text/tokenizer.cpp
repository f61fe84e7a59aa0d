// The tokenizer factory (GGUF tokenizer.ggml.model -> implementation), the
// parts of encoding and decoding that every vocabulary type shares (BOS/EOS,
// special-token fragments, token pieces), and streaming decode.
#include "text/tokenizer.h"

#include "core/error.h"
#include "format/gguf.h"
#include "text/tokenizer_vocab.h"
#include "text/unicode_util.h"

namespace spool {

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, render_special);
  return out;
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool after_special = true;  // the start of the input counts as a boundary
  for (const Fragment& frag : partition_special(vocab_, text, parse_special)) {
    if (frag.token >= 0) {
      out.push_back(frag.token);
      after_special = true;
    } else {
      encode_raw(frag.text, after_special, out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  if (add_special && vocab_.add_sep && vocab_.sep >= 0) out.push_back(vocab_.sep);
  return out;
}

int VocabTokenizer::byte_value(int32_t id) const {
  const std::string& t = vocab_.text[id];
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string VocabTokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (!vocab_.valid(id)) return {};
  const uint32_t attr = vocab_.attr[id];
  if (attr & (kAttrUnknown | kAttrControl)) return render_special ? vocab_.text[id] : std::string();
  if (attr & kAttrUserDefined) return vocab_.text[id];
  if (attr & kAttrNormal) return normal_piece(id);
  if (attr & kAttrByte) {
    const int b = byte_value(id);
    return b < 0 ? std::string() : std::string(1, static_cast<char>(b));
  }
  return {};  // unused / undefined tokens print nothing
}

const std::string& VocabTokenizer::token_text(int32_t id) const {
  static const std::string empty;
  return vocab_.valid(id) ? vocab_.text[id] : empty;
}

std::unique_ptr<Tokenizer> load_tokenizer(const gguf::File& file) {
  const gguf::Value* model = file.find("tokenizer.ggml.model");
  if (!model) throw Error("tokenizer: missing tokenizer.ggml.model");
  if (model->type != gguf::ValueType::STRING) throw Error("tokenizer: tokenizer.ggml.model is not a string");
  const std::string& name = model->s;
  if (name == "llama") return make_spm_tokenizer(load_vocab(file, VocabType::kSpm));
  if (name == "gpt2") return make_bpe_tokenizer(load_vocab(file, VocabType::kBpe), file);
  if (name == "bert") return make_wpm_tokenizer(load_vocab(file, VocabType::kWpm));
  throw Error("tokenizer: unsupported tokenizer model '" + name + "' (tokenizer.ggml.model)");
}

}  // namespace spool
