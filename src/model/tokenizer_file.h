// Opening a tokenizer without its model: a GGUF file (a vocab-only one such as
// llama.cpp's ggml-vocab-*.gguf, or any model file), a Hugging Face checkpoint
// directory, a directory holding only tokenizer.json (+ tokenizer_config.json),
// or a tokenizer.json file. No architecture is looked up and no tensor is read,
// so files of architectures spool cannot run still tokenize.
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"
#include "text/tokenizer.h"

namespace spool {

// True when `path` names a tokenizer.json, or a directory with tokenizer.json and no config.json.
bool is_tokenizer_json_path(const std::string& path);

// The metadata (tokenizer.ggml.* keys, chat template) of any of the forms above.
// Throws spool::Error naming the path and the problem.
gguf::File open_tokenizer_file(const std::string& path);

// The tokenizer of any of the forms above.
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path);

}  // namespace spool
