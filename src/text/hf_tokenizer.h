// Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json,
// generation_config.json) turned into the GGUF tokenizer.ggml.* metadata that
// llama.cpp's converter would write, so load_tokenizer() builds the same
// tokenizer from either form. Byte-level BPE only (GPT-2 / Llama 3 / Qwen style).
#pragma once

#include <string>

#include "format/gguf.h"

namespace spool {

// Extra end-of-generation ids (generation_config.json eos_token_id lists);
// GGUF has a single eos key.
inline constexpr const char* kEogIdsKey = "spool.tokenizer.eog_token_ids";

// Reads the tokenizer files of checkpoint directory `dir` into file.kv. The
// vocabulary is padded with unused tokens up to `n_vocab` (the embedding rows)
// when that is larger. Throws spool::Error naming the file and the problem.
void add_hf_tokenizer_metadata(const std::string& dir, int64_t n_vocab, gguf::File& file);

}  // namespace spool
