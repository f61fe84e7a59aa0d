// The synthetic-model writers' shared plumbing (synth/synth_common.h).
#include "synth/synth_common.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/gguf_writer.h"
#include "kernels/kernels.h"

namespace spool {

namespace fs = std::filesystem;

std::string resolve_shared_file(const std::string& relative) {
  std::vector<fs::path> candidates = {fs::path("../shared") / relative};
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    // <repo>/build/spool -> <repo>/../shared
    candidates.push_back(fs::path(exe).parent_path().parent_path().parent_path() / "shared" / relative);
  }
  for (const auto& p : candidates)
    if (fs::exists(p)) return p.string();
  throw Error("cannot find the vocabulary file ../shared/" + relative + "; pass one with --vocab-from FILE.gguf");
}

std::string resolve_shared_model(const std::string& relative) { return resolve_shared_file("models/" + relative); }

// Pads the token list as llama.cpp's converter does for padded embeddings.
int copy_vocab(const gguf::File& vocab, int n_vocab, gguf::Writer& w) {
  const gguf::Value* tokens = vocab.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->elem_type != gguf::ValueType::STRING || tokens->strings.empty())
    throw Error("vocabulary file has no tokenizer.ggml.tokens string array");
  const size_t n_have = tokens->strings.size();
  const size_t n_want = std::max<size_t>(n_have, n_vocab > 0 ? (size_t)n_vocab : 0);
  for (const auto& [key, value] : vocab.kv) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    gguf::Value v = value;
    if (v.is_array() && v.array_size() == n_have && n_want > n_have) {
      if (key == "tokenizer.ggml.tokens")
        for (size_t i = n_have; i < n_want; ++i) v.strings.push_back("[PAD" + std::to_string(i) + "]");
      else if (key == "tokenizer.ggml.token_type") v.ints.resize(n_want, 5);  // LLAMA_TOKEN_TYPE_UNUSED
      else if (!v.floats.empty()) v.floats.resize(n_want, -1000.0);        // scores
      else if (!v.ints.empty()) v.ints.resize(n_want, 0);
    }
    w.set(key, std::move(v));
  }
  return (int)n_want;
}

namespace synth {

std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

const QuantRecipe& require_quant_recipe(const std::string& type) {
  const QuantRecipe* r = find_quant_recipe(type);
  if (!r) {
    std::string list;
    for (const auto& n : quant_recipe_names()) list += (list.empty() ? "" : ", ") + n;
    throw Error("unknown --type '" + type + "' (types: " + list + ")");
  }
  return *r;
}

MixOptions mix_options(const SynthOptions& options) {
  MixOptions m;
  m.pure = options.pure;
  for (const std::string& spec : options.tensor_types) m.overrides.push_back(parse_type_override(spec));
  return m;
}

VocabKeys measure_vocab(const std::string& path) {
  VocabKeys v;
  gguf::Writer w;
  w.set("general.alignment", gguf::value_u32(1));  // unpadded, to measure the keys alone
  const uint64_t without_vocab = w.header_bytes();
  v.n_vocab = copy_vocab(gguf::open(path), 0, w);
  v.header_bytes = w.header_bytes() - without_vocab;
  return v;
}

uint64_t planned_file_bytes(const Metadata& metadata, const std::vector<TensorHeader>& tensors,
                            uint64_t vocab_header_bytes) {
  gguf::Writer w;
  for (const auto& [k, v] : metadata) w.set(k, v);
  for (const TensorHeader& t : tensors) w.add_tensor(t.name, t.type, t.shape);
  // The tokenizer keys are added at write time.
  return w.header_bytes() + vocab_header_bytes + w.data_bytes();
}

std::vector<float> choice_bias(int n_expert, float skew, uint64_t stream) {
  std::vector<int> rank(n_expert);
  std::iota(rank.begin(), rank.end(), 0);
  for (int i = n_expert - 1; i > 0; --i) std::swap(rank[i], rank[mix64(stream + (uint64_t)i) % (uint64_t)(i + 1)]);
  std::vector<float> bias(n_expert);
  for (int e = 0; e < n_expert; ++e) bias[e] = -skew * std::log1p((float)rank[e]);
  return bias;
}

void WeightRows::prepare(DType type) {
  if (random_q4k_ && type == DType::Q4_K) return;
  if (dtype_traits(type).quantized && !pools_.count(type))
    pools_[type] = std::make_unique<BlockPool>(type, seed_, stddev_);
}

bool WeightRows::fill_row(DType type, uint8_t* dst, int64_t n, uint64_t stream) const {
  if (!dtype_traits(type).quantized) return false;
  const int64_t n_blocks = n / dtype_traits(type).block_size;
  if (random_q4k_ && type == DType::Q4_K) q4k_.fill_row(dst, n_blocks, stream);
  else pools_.at(type)->fill_row(dst, n_blocks, stream);
  return true;
}

int thread_count(int requested) {
  return requested > 0 ? requested : (int)std::max(1u, std::thread::hardware_concurrency());
}

void write_gguf(const SynthOptions& o, const Metadata& metadata, const std::string& vocab_from, int n_vocab,
                const std::vector<TensorHeader>& tensors, const RowFill& fill) {
  if (o.out.empty()) throw Error("synth needs an output file (--out FILE.gguf)");
  gguf::Writer w;
  w.set_direct_io(true);  // GBs at device speed, without flooding the page cache
  for (const auto& [k, v] : metadata) w.set(k, v);
  if (copy_vocab(gguf::open(vocab_from), n_vocab, w) != n_vocab)
    throw Error("vocabulary file '" + vocab_from + "' changed while planning");
  for (const TensorHeader& t : tensors) {
    if (!kernels()[t.type].quantize)
      throw Error(std::string("synth: no quantizer for type ") + dtype_name(t.type) + " in this build");
    w.add_tensor(t.name, t.type, t.shape);
  }
  ThreadPool pool(thread_count(o.n_threads));
  w.begin(o.out);
  for (size_t ti = 0; ti < tensors.size(); ++ti)
    w.write_tensor_rows(ti, [&](int64_t row0, int64_t n_rows, void* dst) {
      fill(ti, row0, n_rows, static_cast<uint8_t*>(dst));
    }, &pool);
  w.finish();
}

SynthResult plan_result(const std::string& arch, const SynthOptions& o, const std::string& vocab_from, int n_tensors,
                        int n_vocab, uint64_t bytes, std::string plan_text) {
  SynthResult r;
  r.arch = arch;
  r.type = o.type;
  r.vocab_from = vocab_from;
  r.n_tensors = n_tensors;
  r.n_vocab = n_vocab;
  r.bytes = bytes;
  r.plan = std::move(plan_text);
  r.written = false;
  return r;
}

SynthResult written_result(SynthResult r, const std::chrono::steady_clock::time_point& t0) {
  r.bytes = fs::file_size(r.path);
  r.written = true;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace synth
}  // namespace spool
