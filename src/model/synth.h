// Synthetic models: random-weight GGUF files with the shapes of real models
// (TinyLlama 1.1B, Llama 3.2 1B, Qwen2.5 0.5B, Qwen3 0.6B, DeepSeek-V3 /
// Kimi-K2 in synth_deepseek2.h, and tiny ones for tests) and a real tokenizer
// copied from another GGUF. Speed does not depend
// on weight values, so these stand in for real checkpoints in benchmarks.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace spool {

namespace gguf {
struct File;
class Writer;
}  // namespace gguf

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

struct SynthOptions {
  std::string arch;        // empty: the preset's
  std::string preset = "tiny";
  std::string type = "Q4_0";
  std::string out;
  std::string vocab_from;  // empty: the preset's default vocabulary
  uint64_t seed = 1;
  int n_threads = 0;       // 0: all cores
  int n_layer = 0;         // >0 overrides the preset's layer count
  // deepseek2 presets only:
  int n_expert = 0;        // >0 overrides the routed-expert count
  uint64_t target_size = 0;  // >0: fit layers/experts to a file of at most this many bytes
  float router_skew = NAN; // exp_probs_b = -skew * ln(1 + popularity rank); NaN: the preset's default
  bool dry_run = false;    // plan only: print it, write nothing
};

struct SynthResult {
  std::string path, arch, type, vocab_from;
  int n_tensors = 0, n_vocab = 0;
  uint64_t bytes = 0;      // file size
  double seconds = 0;
  std::string plan;        // deepseek2: the plan in words (shapes, sizes, bytes/token)
  bool written = true;     // false after a dry run (bytes is then the planned size)
};

// Writes the model; throws spool::Error on bad options or I/O failure.
SynthResult synth_model(const SynthOptions& options);

// Where a default data file lives: ../shared/models relative to cwd, or next
// to the executable's repository (as the CLI resolves its default model).
std::string resolve_shared_model(const std::string& relative);
// The same for any file under ../shared ("fixtures/gguf/qwen2-tiny.f32.gguf").
std::string resolve_shared_file(const std::string& relative);

// Copies every tokenizer.* key of `vocab` into w, padding the token list with
// unused "[PAD<i>]" entries up to n_vocab; returns the final vocabulary size.
int copy_vocab(const gguf::File& vocab, int n_vocab, gguf::Writer& w);

}  // namespace spool
