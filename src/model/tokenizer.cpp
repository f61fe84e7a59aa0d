// The tokenizer factory (GGUF tokenizer.ggml.model -> implementation), the
// parts of encoding and decoding that every vocabulary type shares (BOS/EOS,
// special-token fragments, token pieces), and streaming decode.
#include "model/tokenizer.h"

#include "core/error.h"
#include "format/gguf.h"
#include "model/tokenizer_vocab.h"
#include "model/unicode_util.h"

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

// ---- streaming decode --------------------------------------------------------

namespace {
// Length of the longest prefix of `s` that does not end inside an incomplete
// (but so far valid) UTF-8 sequence.
size_t complete_prefix(const std::string& s) {
  const size_t n = s.size();
  // An incomplete sequence is at most 3 bytes: look back for its lead byte.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    if (c < 0x80 || c >= 0xF8) return n;  // ASCII or never-valid byte: nothing to wait for
    const size_t need = unicode::utf8_seq_len(c);
    if ((c & 0xC0) == 0xC0 && need > back) return n - back;  // lead still waiting for bytes
    return n;
  }
  return n;
}
}  // namespace

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, render_special_);
  const size_t n = complete_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace spool
