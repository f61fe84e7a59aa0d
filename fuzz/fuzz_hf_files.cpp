// Fuzz entries for Hugging Face checkpoint files: config.json (through the
// metadata it becomes and the ModelConfig read from that) and tokenizer.json
// with an optional tokenizer_config.json (through the tokenizer they build).
// The input is written into a scratch checkpoint directory.
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "fuzz_targets.h"
#include "model/config.h"
#include "text/chat_template.h"
#include "text/hf_tokenizer.h"
#include "text/tokenizer.h"

namespace spool::fuzz {

int hf_config(const uint8_t* data, size_t size) {
  const std::string path = write_scratch_file("config.json", std::string(reinterpret_cast<const char*>(data), size));
  gguf::File file;
  try {
    const nlohmann::json config = hf::read_json(path);
    hf::config_to_metadata(config, "fuzz", file);
  } catch (const Error&) {
    return 0;
  }
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
    try {
      (void)read_config(file, 64, style);
    } catch (const Error&) {
    }
  }
  return 0;
}

int hf_tokenizer(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = split_parts(data, size, 2);
  write_scratch_file("tokenizer.json", parts[0]);
  if (parts.size() > 1) write_scratch_file("tokenizer_config.json", parts[1]);
  else remove_scratch_file("tokenizer_config.json");
  gguf::File file;
  try {
    add_hf_tokenizer_metadata(scratch_dir(), 0, file);
  } catch (const Error&) {
    return 0;
  }
  try {
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(file);
    for (const char* t : {"Hello world", "héllo  wörld\n\n 123 ☃ 𝄞", "<|im_start|>user<|im_end|>", "\xff\xfe a"}) {
      const std::vector<int32_t> ids = tok->encode(t, true, true);
      (void)tok->decode(ids);
    }
    const std::string source = chat_template_source(file);
    if (!source.empty()) {
      const ChatTemplate tmpl(source);
      (void)chat_prompt_tokens({{"system", "Be brief."}, {"user", "Hi"}}, *tok, tmpl);
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace spool::fuzz
