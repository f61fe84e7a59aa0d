// What every synthetic-model writer shares: the options and the result of
// `spool synth`, where default vocabulary files live, copying a vocabulary's
// tokenizer keys, and the writer plumbing (dtype recipe lookup, planned file
// size, router selection bias, quantized weight rows, the parallel write loop).
// synth.h (llama family), synth_deepseek2.h and synth_kimi_k3.h build on it.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"
#include "synth/synth_fill.h"
#include "synth/synth_quant_mix.h"

namespace spool {

namespace gguf {
class Writer;
}  // namespace gguf

struct SynthOptions {
  std::string arch;        // empty: the preset's
  std::string preset = "tiny";
  std::string type = "Q4_0";
  std::vector<std::string> tensor_types;  // --tensor-type PATTERN=TYPE overrides, first match wins
  bool pure = false;                       // --pure: no mix rules, every matrix the recipe's base type
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

// Where a default data file lives: ../shared/models relative to cwd, or next
// to the executable's repository (as the CLI resolves its default model).
std::string resolve_shared_model(const std::string& relative);
// The same for any file under ../shared ("fixtures/gguf/qwen2-tiny.f32.gguf").
std::string resolve_shared_file(const std::string& relative);

// Copies every tokenizer.* key of `vocab` into w, padding the token list with
// unused "[PAD<i>]" entries up to n_vocab; returns the final vocabulary size.
int copy_vocab(const gguf::File& vocab, int n_vocab, gguf::Writer& w);

namespace synth {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));

// The recipe --type names; throws spool::Error listing the known types.
const QuantRecipe& require_quant_recipe(const std::string& type);
// --tensor-type and --pure as mix_types takes them; throws spool::Error on a bad override.
MixOptions mix_options(const SynthOptions& options);

// A vocabulary file's token count and the header bytes its tokenizer keys add.
struct VocabKeys {
  int n_vocab = 0;
  uint64_t header_bytes = 0;
};
VocabKeys measure_vocab(const std::string& path);

// One tensor as the GGUF header describes it.
struct TensorHeader {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
};
template <class Tensor>  // any planned tensor with name, type and shape
std::vector<TensorHeader> tensor_headers(const std::vector<Tensor>& tensors) {
  std::vector<TensorHeader> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back({t.name, t.type, t.shape});
  return out;
}

using Metadata = std::vector<std::pair<std::string, gguf::Value>>;

// Header + data bytes of a GGUF file holding `metadata` and `tensors` plus
// vocab_header_bytes of tokenizer keys; the header's final padding is at most
// 31 bytes off.
uint64_t planned_file_bytes(const Metadata& metadata, const std::vector<TensorHeader>& tensors,
                            uint64_t vocab_header_bytes);

// exp_probs_b[e] = -skew * ln(1 + rank[e]), rank a random permutation drawn
// from `stream`: a Zipf-like penalty on the selection score (it never changes
// mixing weights), so experts get a skewed popularity as in real models.
std::vector<float> choice_bias(int n_expert, float skew, uint64_t stream);

// The random streams of tensor ti of a file and of one of its rows.
inline uint64_t tensor_stream(uint64_t seed, size_t ti) { return mix64(seed * 0x2545F4914F6CDD1Dull + ti + 1); }
inline uint64_t row_stream(uint64_t tensor_stream, int64_t row) {
  return mix64(tensor_stream ^ (uint64_t)row * 0xD1B54A32D192ED03ull);
}

// Quantized weight rows without running a quantizer per row: from a pool of
// pre-quantized blocks (BlockPool), or for Q4_K with random_q4k straight from
// random bytes (RandomQ4K; the MoE writers, whose experts are most of a file).
class WeightRows {
 public:
  WeightRows(uint64_t seed, float stddev, bool random_q4k)
      : seed_(seed), stddev_(stddev), random_q4k_(random_q4k), q4k_(stddev) {}
  void prepare(DType type);  // before the threads start: builds type's pool
  // Fills one row of n values; false when `type` is not quantized (the caller draws floats).
  bool fill_row(DType type, uint8_t* dst, int64_t n, uint64_t stream) const;

 private:
  uint64_t seed_;
  float stddev_;
  bool random_q4k_;
  RandomQ4K q4k_;
  std::map<DType, std::unique_ptr<BlockPool>> pools_;
};

// Fills rows [row0, row0 + n_rows) of tensor ti into dst (row after row).
using RowFill = std::function<void(size_t ti, int64_t row0, int64_t n_rows, uint8_t* dst)>;

// Writes options.out: metadata, then the vocabulary file's tokenizer keys
// (padded to n_vocab; an error when the file no longer has that many tokens),
// then every tensor's rows from `fill`, in parallel, streamed to disk with
// O_DIRECT. Checks up front that every type has a quantizer (a missing one
// inside a worker thread would abort).
void write_gguf(const SynthOptions& options, const Metadata& metadata, const std::string& vocab_from, int n_vocab,
                const std::vector<TensorHeader>& tensors, const RowFill& fill);

// The thread count for options.n_threads (0: every core).
int thread_count(int requested);

// What a dry run reports, or a write before its size and time are filled in.
SynthResult plan_result(const std::string& arch, const SynthOptions& options, const std::string& vocab_from,
                        int n_tensors, int n_vocab, uint64_t bytes, std::string plan_text);
// The result of a finished write: the file's size and the time since t0.
SynthResult written_result(SynthResult r, const std::chrono::steady_clock::time_point& t0);

}  // namespace synth
}  // namespace spool
