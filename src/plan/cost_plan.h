// What a model costs on a device (`spool plan`): total and per-token bytes
// (attention, dense feed-forward, output, active routed experts), what stays
// resident under a RAM budget, bytes read from storage per token at an
// expert-cache hit rate, KV + recurrent-state bytes per token of context, and
// decode tok/s and time to first token from the storage bound (placement as
// spool's streaming store makes it). Works from a
// GGUF's tensor table and metadata, or from the Kimi K3 preset (the released
// 2.8T shapes) without a file. Every assumption is returned in words.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace spool {

namespace gguf { struct File; }

struct DeviceProfile {
  std::string name;
  double ram_bytes = 0;     // physical RAM
  double budget_bytes = 0;  // what the engine may use (RAM less the OS and other apps)
  double read_bw = 0;       // storage read bandwidth, bytes/s
  std::string what;         // description, with where the numbers come from
};

std::vector<DeviceProfile> device_profiles();
const DeviceProfile* find_device_profile(const std::string& name);

// One tensor of the model. Routed-expert tensors are whole (all experts).
struct CostTensor {
  std::string name;
  uint64_t bytes = 0;
  int layer = -1;
  bool routed_expert = false;
};

struct CostModel {
  std::string source;  // file path, or "preset kimi-k3"
  std::string arch;
  std::string types;   // dtypes in words
  std::vector<CostTensor> tensors;
  int n_layer = 0, n_expert = 0, n_expert_used = 0, n_vocab = 0;
  int expert_row = 0;  // floats a routed expert reads (and writes) per token: n_embd, or K3's latent width
  ModelConfig kv;      // what the KV / state arithmetic needs (layer pattern, MLA, recurrent shape)
  bool state_known = true;  // false: recurrent layers whose state size this plan cannot derive
};

// How the weights are typed: "native" (as the file or checkpoint has them) or
// any synth --type (a uniform type, a llama.cpp file type with its per-tensor
// rules, a dynamic mix such as UD-IQ1_S) with --tensor-type overrides. Bytes
// come from the type table's bytes per block.
struct PlanTypes {
  std::string type = "native";
  std::vector<std::string> tensor_types;  // PATTERN=TYPE
  bool native() const { return type == "native"; }  // --tensor-type needs a --type
};

// From a GGUF's tensor table and metadata (nothing is loaded); with a type,
// every tensor is retyped from its shape as llama-quantize would requantize it.
CostModel cost_model_from_gguf(const gguf::File& file, const std::string& path, const PlanTypes& types = {});
// The released Kimi K3 (see synth_kimi_k3.h for the shapes): "native" is MXFP4
// experts, BF16 the rest, as the checkpoint ships; otherwise a synth --type.
CostModel cost_model_kimi_k3(const std::string& type);
CostModel cost_model_kimi_k3(const PlanTypes& types);
// The released Kimi K2 or DeepSeek-V3 (deepseek2 presets "kimi-k2",
// "deepseek-v3": the real layer, expert and vocabulary counts) in a synth
// --type; they ship in FP8, so there is no "native" here.
CostModel cost_model_deepseek2(const std::string& preset, const PlanTypes& types);

struct PlanOptions {
  DeviceProfile device;
  double hit_rate = NAN;  // expert-cache hit rate; NaN: the cached fraction of experts (uniform routing)
  int n_ctx = 4096;       // context reserved for KV (one sequence)
  int n_prompt = 512;     // prompt length for TTFT
  int n_chunk = 512;      // prefill chunk (tokens per forward pass)
  // Expert parallelism (--dist ep, docs/DISTRIBUTED.md): `nodes` machines
  // like `device`, linked at net_bw bytes/s with net_latency s each way.
  int nodes = 1;
  double net_bw = 125e6;      // 1 Gbit/s
  double net_latency = 2e-4;  // 0.2 ms
};

struct CostReport {
  // The model.
  uint64_t total = 0, experts_total = 0, dense_total = 0;
  int n_moe_layers = 0;
  uint64_t expert_bytes = 0;  // one routed expert, averaged over MoE layers
  // Touched per decoded token with nothing cached.
  uint64_t tok_attention = 0, tok_ffn = 0, tok_output = 0, tok_other = 0, tok_experts = 0;
  uint64_t tok_dense() const { return tok_attention + tok_ffn + tok_output + tok_other; }
  uint64_t tok_total() const { return tok_dense() + tok_experts; }
  // Context.
  uint64_t kv_per_token = 0, state_per_seq = 0, kv_reserved = 0;
  // On the device.
  double budget = 0, dense_resident = 0, dense_streamed = 0, tensor_slots = 0, expert_cache = 0;
  bool fits_streaming_minimum = true;  // false: spool's streaming store would refuse the budget
  double cached_fraction = 0, hit_rate = 0;
  bool hit_rate_given = false;
  double read_per_token = 0, decode_tok_s = 0;
  double prefill_read = 0, ttft_s = 0, distinct_per_chunk = 0;
  // With nodes > 1: per decoded token, the expert bytes each node reads (its
  // share), the bytes on the network (rows out and back) and the time they
  // take with one round trip per MoE layer; decode_tok_s includes them.
  double node_expert_read = 0, net_bytes_per_token = 0, net_s_per_token = 0, node_cached_fraction = 0;
  std::vector<std::string> assumptions;
};

CostReport compute_cost(const CostModel& model, const PlanOptions& options);
std::string describe_cost(const CostModel& model, const PlanOptions& options, const CostReport& report);

// KV + recurrent-state bytes at a context length, for one sequence.
uint64_t context_bytes(const ModelConfig& kv, int n_ctx);

// K3 against full-attention models of the same size: the same K3 with every
// layer MLA, and a GQA model with K3's layer count (8 KV heads x 128, F32 like
// spool's MLA cache). Rows: name, bytes per token, fixed state, bytes at each context.
struct ContextRow {
  std::string model;
  uint64_t per_token = 0, fixed = 0;
  std::vector<uint64_t> at;
};
std::vector<ContextRow> context_comparison(const CostModel& k3, const std::vector<int>& contexts);
std::string describe_context_comparison(const std::vector<ContextRow>& rows, const std::vector<int>& contexts);

}  // namespace spool
