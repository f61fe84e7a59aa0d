// Synthetic models: random-weight GGUF files with the shapes of real models
// (TinyLlama 1.1B, Llama 3.2 1B, Qwen2.5 0.5B, Qwen3 0.6B here; DeepSeek-V3 /
// Kimi-K2 in synth_deepseek2.h, Kimi K3 in synth_kimi_k3.h; tiny ones for
// tests) and a real tokenizer copied from another GGUF. Speed does not depend
// on weight values, so these stand in for real checkpoints in benchmarks.
// synth_model() is the one entry point: it picks the writer by preset.
#pragma once

#include <string>
#include <vector>

#include "synth/synth_common.h"

namespace spool {

struct SynthShape {
  const char* name;
  const char* arch;       // GGUF architecture; nullptr: any llama-family arch (--arch)
  int n_embd, n_layer, n_head, n_head_kv;
  int head_dim;           // 0: n_embd / n_head
  int n_ff;
  int n_vocab;            // 0: the vocabulary file's size; else padded up to this
  int n_ctx;
  float rope_base, rms_eps;
  bool tied_embeddings;
  const char* vocab_file; // default --vocab-from, relative to the shared models dir
};

const SynthShape* find_synth_preset(const std::string& name);
std::vector<std::string> synth_preset_names();

// Writes the model; throws spool::Error on bad options or I/O failure.
SynthResult synth_model(const SynthOptions& options);

}  // namespace spool
