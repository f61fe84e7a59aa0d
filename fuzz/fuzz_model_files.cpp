// Fuzz entries for model files: GGUF (header, metadata, tensor directory, then
// the tokenizer and model config read from that metadata) and safetensors
// (header, then whole-tensor reads of the small tensors). Both parsers read
// files, so the input is written to a scratch file first.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "format/manifest.h"
#include "format/safetensors.h"
#include "fuzz_targets.h"
#include "model/config.h"
#include "text/tokenizer.h"

namespace spool::fuzz {

namespace {

// What a tokenizer built from outside metadata must survive: encode and decode
// of awkward text, every token's piece.
void exercise_tokenizer(const Tokenizer& tok) {
  static const char* texts[] = {"Hello world", " \n\t  x", "héllo wörld 123 ☃ 𝄞", "<s></s><|im_start|>", "\xff\xfe\x80 a"};
  for (const char* t : texts) {
    const std::vector<int32_t> ids = tok.encode(t, true, true);
    (void)tok.decode(ids);
  }
  const int32_t n = std::min<int32_t>(tok.n_vocab(), 4096);
  for (int32_t id = 0; id < n; ++id) {
    (void)tok.token_to_piece(id, true);
    (void)tok.is_eog(id);
  }
}

}  // namespace

int gguf(const uint8_t* data, size_t size) {
  const std::string path = write_scratch_file("model.gguf", std::string(reinterpret_cast<const char*>(data), size));
  gguf::File file;
  try {
    file = gguf::open(path);
  } catch (const Error&) {
    return 0;
  }
  try {
    split_expert_tensors(file.manifest);
  } catch (const Error&) {
  }
  int n_vocab = 32;
  try {
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(file);
    exercise_tokenizer(*tok);
    n_vocab = std::max(1, tok->n_vocab());
  } catch (const Error&) {
  }
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
    try {
      (void)read_config(file, n_vocab, style);
    } catch (const Error&) {
    }
  }
  return 0;
}

int safetensors(const uint8_t* data, size_t size) {
  const std::string path =
      write_scratch_file("model.safetensors", std::string(reinterpret_cast<const char*>(data), size));
  safetensors::File file;
  try {
    file = safetensors::open(path);
  } catch (const Error&) {
    return 0;
  }
  for (const auto& [name, e] : file.tensors) {
    if (e.bytes > (1u << 16)) continue;
    try {
      (void)file.read_f32(name);
    } catch (const Error&) {
    }
    try {
      (void)file.read_i64(name);
    } catch (const Error&) {
    }
  }
  return 0;
}

}  // namespace spool::fuzz
