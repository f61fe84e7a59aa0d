// Synthetic model generation: a tensor plan from the preset shape, llama.cpp's
// metadata keys, a tokenizer copied from a vocabulary GGUF, and weights drawn
// row by row from a counter-based generator (so the file depends only on the
// seed, not on the thread count), produced in parallel while writing.
#include "synth/synth.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "kernels/kernels.h"
#include "synth/synth_deepseek2.h"
#include "synth/synth_fill.h"
#include "synth/synth_kimi_k3.h"
#include "synth/synth_quant_mix.h"

namespace spool {
namespace {

constexpr const char* kLlamaVocab = "llama-2-tiny-random.gguf";
// No Qwen or Llama-3 vocabulary GGUF is in the shared data; GPT-2's byte-level
// BPE (the same family) is padded up to the real vocabulary size instead.
constexpr const char* kBpeVocab = "llama.cpp-vocab/ggml-vocab-gpt-2.gguf";

constexpr SynthShape kPresets[] = {
    // name            arch      embd  layer head kv  hd   ff    vocab   ctx     rope_base eps    tied  vocab file
    {"tiny", nullptr, 256, 2, 8, 4, 0, 768, 0, 2048, 10000.0f, 1e-5f, false, kLlamaVocab},
    {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 0, 5632, 32000, 2048, 10000.0f, 1e-5f, false, kLlamaVocab},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true, kBpeVocab},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, kBpeVocab},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, true, kBpeVocab},
};

const char* kSupportedArchs[] = {"llama", "qwen2", "qwen3"};

// How a tensor's values are drawn.
enum class Init { Weight, NearOne, Bias };

struct PlannedTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType type;
  Init init;
};

struct Shape {
  std::string arch;
  int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
  float rope_base, rms_eps;
  bool tied;
};

using synth::fill_normal;

void fill_tensor_row(const PlannedTensor& t, float* x, uint64_t stream) {
  const int64_t n = t.shape[0];
  switch (t.init) {
    // std 0.02 (GPT-2/Llama initialisation) keeps activations well inside range.
    case Init::Weight: fill_normal(x, n, stream, 0.0f, 0.02f); break;
    case Init::NearOne: fill_normal(x, n, stream, 1.0f, 0.02f); break;
    case Init::Bias: fill_normal(x, n, stream, 0.0f, 0.01f); break;
  }
}

// ---- plan ------------------------------------------------------------------------

Shape resolve_shape(const SynthShape& p, const SynthOptions& o) {
  Shape s;
  s.arch = !o.arch.empty() ? o.arch : p.arch ? p.arch : "llama";
  if (p.arch && s.arch != p.arch)
    throw Error("preset '" + std::string(p.name) + "' is a " + p.arch + " model; --arch " + s.arch +
                " does not match (use --preset tiny for any architecture)");
  bool known = false;
  for (const char* a : kSupportedArchs) known |= s.arch == a;
  if (!known) throw Error("synth: unsupported architecture '" + s.arch + "' (supported: llama, qwen2, qwen3, deepseek2)");
  s.n_embd = p.n_embd;
  s.n_layer = o.n_layer > 0 ? o.n_layer : p.n_layer;
  s.n_head = p.n_head;
  s.n_head_kv = p.n_head_kv;
  s.head_dim = p.head_dim > 0 ? p.head_dim : p.n_embd / p.n_head;
  s.n_ff = p.n_ff;
  s.n_vocab = p.n_vocab;
  s.n_ctx = p.n_ctx;
  s.rope_base = p.rope_base;
  s.rms_eps = p.rms_eps;
  s.tied = p.tied_embeddings;
  return s;
}

std::vector<PlannedTensor> plan_tensors(const Shape& s, const QuantRecipe& recipe, const MixOptions& mix) {
  std::vector<PlannedTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, Init init, int) {
    out.push_back({name, std::move(shape), DType::F32, init});
  };
  const int64_t q_dim = (int64_t)s.n_head * s.head_dim, kv_dim = (int64_t)s.n_head_kv * s.head_dim;
  add("token_embd.weight", {s.n_embd, s.n_vocab}, Init::Weight, -1);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {s.n_embd}, Init::NearOne, l);
    add(p + "attn_q.weight", {s.n_embd, q_dim}, Init::Weight, l);
    add(p + "attn_k.weight", {s.n_embd, kv_dim}, Init::Weight, l);
    add(p + "attn_v.weight", {s.n_embd, kv_dim}, Init::Weight, l);
    if (s.arch == "qwen2") {
      add(p + "attn_q.bias", {q_dim}, Init::Bias, l);
      add(p + "attn_k.bias", {kv_dim}, Init::Bias, l);
      add(p + "attn_v.bias", {kv_dim}, Init::Bias, l);
    }
    if (s.arch == "qwen3") {
      add(p + "attn_q_norm.weight", {s.head_dim}, Init::NearOne, l);
      add(p + "attn_k_norm.weight", {s.head_dim}, Init::NearOne, l);
    }
    add(p + "attn_output.weight", {q_dim, s.n_embd}, Init::Weight, l);
    add(p + "ffn_norm.weight", {s.n_embd}, Init::NearOne, l);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, Init::Weight, l);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, Init::Weight, l);
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, Init::Weight, l);
  }
  add("output_norm.weight", {s.n_embd}, Init::NearOne, -1);
  if (!s.tied) add("output.weight", {s.n_embd, s.n_vocab}, Init::Weight, -1);
  // Types over the whole list: llama.cpp's rules keep running counters.
  std::vector<MixTensor> mt;
  for (const PlannedTensor& t : out) mt.push_back({t.name, t.shape, t.init == Init::Weight});
  MixModel model;
  model.n_layer = s.n_layer;
  model.n_gqa = s.n_head_kv > 0 ? s.n_head / s.n_head_kv : 1;
  const std::vector<DType> types = mix_types(recipe, model, mt, mix);
  for (size_t i = 0; i < out.size(); ++i) out[i].type = types[i];
  return out;
}

// ---- metadata --------------------------------------------------------------------

void set_model_metadata(const Shape& s, const std::string& preset, const QuantRecipe& recipe, uint64_t seed,
                        bool quantized, gguf::Writer& w) {
  using namespace gguf;
  const std::string a = s.arch + ".";
  w.set("general.architecture", value_string(s.arch));
  w.set("general.name", value_string(preset + "-synthetic"));
  w.set("general.description", value_string("random weights from spool synth, seed " + std::to_string(seed)));
  w.set("general.file_type", value_u32((uint32_t)recipe.file_type));
  if (quantized) w.set("general.quantization_version", value_u32(2));
  w.set(a + "vocab_size", value_u32((uint32_t)s.n_vocab));
  w.set(a + "context_length", value_u32((uint32_t)s.n_ctx));
  w.set(a + "embedding_length", value_u32((uint32_t)s.n_embd));
  w.set(a + "block_count", value_u32((uint32_t)s.n_layer));
  w.set(a + "feed_forward_length", value_u32((uint32_t)s.n_ff));
  w.set(a + "attention.head_count", value_u32((uint32_t)s.n_head));
  w.set(a + "attention.head_count_kv", value_u32((uint32_t)s.n_head_kv));
  if (s.head_dim != s.n_embd / s.n_head) {
    w.set(a + "attention.key_length", value_u32((uint32_t)s.head_dim));
    w.set(a + "attention.value_length", value_u32((uint32_t)s.head_dim));
  }
  w.set(a + "rope.dimension_count", value_u32((uint32_t)s.head_dim));
  w.set(a + "rope.freq_base", value_f32(s.rope_base));
  w.set(a + "attention.layer_norm_rms_epsilon", value_f32(s.rms_eps));
}

// ---- writing ---------------------------------------------------------------------

void write_weights(const std::vector<PlannedTensor>& plan, uint64_t seed, ThreadPool& pool, gguf::Writer& w) {
  synth::WeightRows blocks(seed, 0.02f, /*random_q4k=*/false);
  for (const PlannedTensor& t : plan)
    if (t.init == Init::Weight) blocks.prepare(t.type);
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const PlannedTensor& t = plan[ti];
    const size_t rb = row_bytes(t.type, t.shape[0]);
    const uint64_t tensor_stream = synth::tensor_stream(seed, ti);
    auto fill = [&](int64_t row0, int64_t n_rows, void* dst) {
      thread_local std::vector<float> row;
      row.resize((size_t)t.shape[0]);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint64_t stream = synth::row_stream(tensor_stream, row0 + r);
        uint8_t* out = static_cast<uint8_t*>(dst) + (size_t)r * rb;
        if (t.init == Init::Weight && blocks.fill_row(t.type, out, t.shape[0], stream)) continue;
        fill_tensor_row(t, row.data(), stream);
        quantize_row(t.type, row.data(), out, t.shape[0]);
      }
    };
    w.write_tensor_rows(ti, fill, &pool);
  }
}

}  // namespace

const SynthShape* find_synth_preset(const std::string& name) {
  for (const SynthShape& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

std::vector<std::string> synth_preset_names() {
  std::vector<std::string> out;
  for (const SynthShape& p : kPresets) out.push_back(p.name);
  return out;
}

SynthResult synth_model(const SynthOptions& o) {
  if (o.arch == "deepseek2" || find_deepseek2_preset(o.preset)) {
    const Deepseek2Plan plan = plan_deepseek2(o);
    if (!o.dry_run) return write_deepseek2(plan, o);
    return synth::plan_result("deepseek2", o, plan.vocab_from, (int)plan.tensors.size(), plan.n_vocab,
                              plan.file_bytes, describe_plan(plan));
  }
  if (o.arch == "kimi-k3" || find_kimi_k3_preset(o.preset)) {
    const KimiK3Plan plan = plan_kimi_k3(o);
    if (!o.dry_run) return write_kimi_k3(plan, o);
    return synth::plan_result("kimi-k3", o, plan.vocab_from, (int)plan.tensors.size(), plan.n_vocab,
                              plan.file_bytes, describe_kimi_k3_plan(plan));
  }
  if (o.dry_run) throw Error("synth: --dry-run is only implemented for the deepseek2 and kimi-k3 presets");
  if (o.n_expert > 0 || o.target_size > 0)
    throw Error("synth: --n-expert and --target-size apply to the deepseek2 and kimi-k3 presets only");
  const auto t0 = std::chrono::steady_clock::now();
  const SynthShape* preset = find_synth_preset(o.preset);
  if (!preset) {
    std::string list;
    for (const auto& n : synth_preset_names()) list += (list.empty() ? "" : ", ") + n;
    for (const auto& n : deepseek2_preset_names()) list += ", " + n;
    for (const auto& n : kimi_k3_preset_names()) list += ", " + n;
    throw Error("unknown preset '" + o.preset + "' (presets: " + list + ")");
  }
  const QuantRecipe* recipe = &synth::require_quant_recipe(o.type);
  const MixOptions mix = synth::mix_options(o);
  if (o.out.empty()) throw Error("synth needs an output file (--out FILE.gguf)");
  Shape shape = resolve_shape(*preset, o);

  SynthResult res;
  res.vocab_from = o.vocab_from.empty() ? resolve_shared_model(preset->vocab_file) : o.vocab_from;
  gguf::Writer w;
  set_model_metadata(shape, preset->name, *recipe, o.seed, dtype_traits(recipe->base).quantized, w);
  shape.n_vocab = copy_vocab(gguf::open(res.vocab_from), shape.n_vocab, w);
  w.set(shape.arch + ".vocab_size", gguf::value_u32((uint32_t)shape.n_vocab));

  const std::vector<PlannedTensor> plan = plan_tensors(shape, *recipe, mix);
  for (const PlannedTensor& t : plan) {
    // Checked up front: a missing quantizer inside a worker thread would abort.
    if (!kernels()[t.type].quantize)
      throw Error(std::string("synth: no quantizer for type ") + dtype_name(t.type) + " in this build");
    w.add_tensor(t.name, t.type, t.shape);
  }
  ThreadPool pool(synth::thread_count(o.n_threads));
  w.begin(o.out);
  write_weights(plan, o.seed, pool, w);
  w.finish();

  res.path = o.out;
  res.arch = shape.arch;
  res.type = recipe->name;
  res.n_tensors = (int)plan.size();
  res.n_vocab = shape.n_vocab;
  return synth::written_result(std::move(res), t0);
}

}  // namespace spool
