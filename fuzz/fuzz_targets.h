// Fuzz entry points: one function per parser of outside data, called by the
// libFuzzer binary (fuzz/libfuzzer_main.cpp, built with -DSPOOL_FUZZ=ON) and
// by the normal test suite, which replays every input kept under
// tests/fuzz_regressions/<target>/ (tests/fuzz_regressions_test.cpp).
// An entry returns normally for any input the parser accepts or refuses with
// its documented error; anything else (another exception, a crash, a
// sanitizer report, a hang) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spool::fuzz {

using Entry = int (*)(const uint8_t* data, size_t size);

int gguf(const uint8_t* data, size_t size);           // GGUF header, metadata, tensor infos, tokenizer, config
int safetensors(const uint8_t* data, size_t size);    // safetensors header (+ small tensor reads)
int hf_config(const uint8_t* data, size_t size);      // HF config.json -> metadata -> ModelConfig
int hf_tokenizer(const uint8_t* data, size_t size);   // tokenizer.json [+ tokenizer_config.json] -> Tokenizer
int jinja(const uint8_t* data, size_t size);          // Jinja lexer + parser + renderer (chat templates)
int openai_request(const uint8_t* data, size_t size); // /v1/completions and /v1/chat/completions bodies
int pipeline_spec(const uint8_t* data, size_t size);  // pipeline specs (JSON or YAML) + prompt templates
int http_range(const uint8_t* data, size_t size);     // HTTP range responses (status, Content-Range, body)

struct Target {
  const char* name;
  Entry entry;
};
// Every target, by the name $SPOOL_FUZZ_TARGET and its regression folder carry.
const std::vector<Target>& targets();

// Inputs with several parts (tokenizer.json + tokenizer_config.json) are split at this line.
inline constexpr const char* kPartSeparator = "\n--spool-fuzz-part--\n";
std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t max_parts);

// A per-process scratch directory for parsers that read files; `name` is written there.
std::string write_scratch_file(const std::string& name, const std::string& content);
void remove_scratch_file(const std::string& name);
std::string scratch_dir();

// The shared test data (stories260K.gguf for the tokenizer): $SPOOL_FUZZ_SHARED, else ../shared.
std::string shared_dir();

}  // namespace spool::fuzz
