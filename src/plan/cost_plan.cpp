// `spool plan` arithmetic: sorts a model's tensors into what a decoded token
// touches (attention, feed-forward, output, one embedding row, its top-k
// routed experts), places them under a device's RAM budget (dense weights
// first, as the streaming store does, then an expert cache), and turns the
// bytes that must still come from storage into tok/s and TTFT bounds. KV and
// recurrent-state sizes come from kv_bytes_estimate, the engine's own budget.
#include "plan/cost_plan.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model/model.h"
#include "synth/synth_common.h"
#include "synth/synth_kimi_k3.h"

namespace spool {
namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// KV / state shape of a Kimi-style hybrid: MLA layers cache one latent row;
// KDA layers keep (kernel - 1) inputs of the q, k and v convolutions and a
// [head_dim x head_dim] delta-rule matrix per head.
void set_kimi_kv(ModelConfig& c, const std::vector<bool>& is_mla, int n_head, int kda_head_dim, int conv_kernel,
                 int kv_lora_rank, int rope_dims) {
  c.n_layer = (int)is_mla.size();
  c.mla.kv_lora_rank = kv_lora_rank;
  c.rope.n_dims = rope_dims;
  c.layer_recurrent.assign(is_mla.size(), 0);
  c.recurrent.conv_floats.assign(is_mla.size(), 0);
  c.recurrent.ssm_floats.assign(is_mla.size(), 0);
  const int64_t D = (int64_t)n_head * kda_head_dim;
  for (size_t l = 0; l < is_mla.size(); ++l) {
    if (is_mla[l]) continue;
    c.layer_recurrent[l] = 1;
    c.recurrent.conv_floats[l] = (int64_t)(conv_kernel - 1) * 3 * D;
    c.recurrent.ssm_floats[l] = (int64_t)n_head * kda_head_dim * kda_head_dim;
  }
}

std::string gb(double bytes) { return fmt("%.3f GB", bytes / 1e9); }

uint64_t round_page(uint64_t x) { return (x + 4095) / 4096 * 4096; }

// Non-expert tensors under spool's streaming store (weights/streaming_store.cpp,
// choose_residency): for a tensor slot size m, 3 slots of m; every tensor
// larger than m resident, the others resident largest first while they fit,
// the rest streamed through the slots. The m that streams fewest bytes wins.
struct DensePlacement {
  bool ok = false;
  uint64_t resident = 0;      // page-rounded bytes held
  uint64_t streamed = 0;      // bytes read every token
  uint64_t tensor_slots = 0;  // 3 x the slot size, when anything streams
};

DensePlacement place_dense(std::vector<uint64_t> sizes, uint64_t room) {
  std::stable_sort(sizes.begin(), sizes.end(), std::greater<uint64_t>());
  std::set<uint64_t> slot_sizes = {0};
  for (uint64_t b : sizes) slot_sizes.insert(round_page(b));
  DensePlacement best;
  for (uint64_t m : slot_sizes) {
    if (room < 3 * m) continue;
    const uint64_t left = room - 3 * m;
    DensePlacement p;
    p.ok = true;
    for (uint64_t b : sizes) {
      const uint64_t cost = round_page(b);
      if (p.resident + cost <= left) p.resident += cost;
      else if (cost > m) { p.ok = false; break; }
      else p.streamed += b;
    }
    if (!p.ok) continue;
    p.tensor_slots = p.streamed ? 3 * m : 0;
    if (!best.ok || p.streamed < best.streamed || (p.streamed == best.streamed && p.tensor_slots < best.tensor_slots))
      best = p;
    if (best.streamed == 0) break;
  }
  return best;
}

// What llama-quantize would not quantize (its tensor_allows_quantization, the
// parts that apply to the architectures spool reads).
bool quantizable(const std::string& name, size_t n_dims) {
  const bool weight = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
  return n_dims >= 2 && weight && !contains(name, "_norm.weight") && !contains(name, "ffn_gate_inp") &&
         !contains(name, "ssm_conv1d") && !contains(name, "shortconv");
}

// The file's tensors retyped from their shapes as `types` assigns them. Stacked
// expert tensors count once however the manifest slices them, so llama.cpp's
// running counters see what its quantizer sees.
std::vector<DType> retype(const gguf::File& f, const std::string& arch, const PlanTypes& types) {
  const QuantRecipe& recipe = synth::require_quant_recipe(types.type);
  SynthOptions so;
  so.tensor_types = types.tensor_types;
  const MixOptions mix = synth::mix_options(so);
  MixModel model;
  model.n_layer = (int)f.get_int(arch + ".block_count");
  model.n_expert = (int)f.get_int(arch + ".expert_count", 0);
  const int64_t n_head = f.get_int(arch + ".attention.head_count", 1);
  const gguf::Value* kv = f.find(arch + ".attention.head_count_kv");
  const int64_t n_head_kv = kv && kv->is_integer() ? kv->i : kv && !kv->ints.empty() ? kv->ints[0] : n_head;
  model.n_gqa = n_head_kv > 0 ? (int)(n_head / n_head_kv) : 1;
  std::vector<MixTensor> whole;
  std::map<std::string, size_t> index;  // whole tensor name -> index in `whole`
  std::vector<size_t> of(f.manifest.tensors.size());
  for (size_t i = 0; i < f.manifest.tensors.size(); ++i) {
    const TensorEntry& t = f.manifest.tensors[i];
    const std::string name = t.name.substr(0, t.name.rfind('#'));
    auto [it, fresh] = index.emplace(name, whole.size());
    if (fresh) whole.push_back({name, t.shape, quantizable(name, t.shape.size())});
    of[i] = it->second;
  }
  const std::vector<DType> mixed = mix_types(recipe, model, whole, mix);
  std::vector<DType> out(of.size());
  for (size_t i = 0; i < of.size(); ++i) out[i] = whole[of[i]].quantize ? mixed[of[i]] : f.manifest.tensors[i].type;
  return out;
}

}  // namespace

std::vector<DeviceProfile> device_profiles() {
  const double GiB = 1073741824.0;
  return {
      {"phone", 8 * GiB, 6 * GiB, 1e9,
       "8 GB phone (iPhone 16 Pro class) streaming from an external SSD at 1 GB/s (USB 3.2 Gen 2); the engine "
       "gets 6 GiB (the seeds' figure for one app on an iPhone 16 Pro, as ../shared/tools/devsim uses)"},
      {"laptop", 16 * GiB, 12 * GiB, 3e9,
       "16 GB laptop with a 3 GB/s NVMe SSD; the engine gets 12 GiB (assumed: 4 GiB for the OS and other apps)"},
      {"workstation", 64 * GiB, 56 * GiB, 7e9,
       "64 GB workstation with a 7 GB/s PCIe 4 NVMe SSD (assumed bandwidth); the engine gets 56 GiB (assumed: "
       "8 GiB for the OS)"},
  };
}

const DeviceProfile* find_device_profile(const std::string& name) {
  static const std::vector<DeviceProfile> profiles = device_profiles();
  for (const DeviceProfile& p : profiles)
    if (p.name == name) return &p;
  return nullptr;
}

CostModel cost_model_from_gguf(const gguf::File& f, const std::string& path, const PlanTypes& types) {
  CostModel m;
  m.source = path;
  m.arch = f.architecture();
  if (m.arch.empty()) throw Error("plan: '" + path + "' has no general.architecture");
  const std::string a = m.arch + ".";
  m.n_layer = (int)f.get_int(a + "block_count");
  m.n_expert = (int)f.get_int(a + "expert_count", 0);
  m.n_expert_used = (int)f.get_int(a + "expert_used_count", 0);
  std::map<std::string, size_t> stacked;  // "blk.N.ffn_up_exps.weight" -> index in m.tensors
  std::map<std::string, uint64_t> by_type;
  if (types.native() && !types.tensor_types.empty()) throw Error("plan: --tensor-type needs a --type to start from");
  const std::vector<DType> retyped = types.native() ? std::vector<DType>() : retype(f, m.arch, types);
  for (size_t ti = 0; ti < f.manifest.tensors.size(); ++ti) {
    TensorEntry t = f.manifest.tensors[ti];
    if (!retyped.empty()) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      t.type = retyped[ti];
      t.bytes = (uint64_t)(n / dtype_traits(t.type).block_size) * dtype_traits(t.type).block_bytes;
    }
    by_type[dtype_name(t.type)] += t.bytes;
    if (t.name == "token_embd.weight" && t.shape.size() >= 2) m.n_vocab = (int)t.shape[1];
    const bool stacked_whole = t.expert < 0 && t.shape.size() == 3 && t.name.size() > 12 &&
                               t.name.compare(t.name.size() - 12, 12, "_exps.weight") == 0;
    if (t.expert >= 0 || stacked_whole) {  // a stacked tensor, or one expert's slice of it
      const std::string whole = t.name.substr(0, t.name.rfind('#'));
      auto it = stacked.find(whole);
      if (it == stacked.end()) {
        stacked[whole] = m.tensors.size();
        m.tensors.push_back({whole, 0, layer_of(whole), true});
        it = stacked.find(whole);
      }
      m.tensors[it->second].bytes += t.bytes;
      continue;
    }
    m.tensors.push_back({t.name, t.bytes, layer_of(t.name), false});
  }
  for (const auto& [type, bytes] : by_type) m.types += fmt("%s%s %s", m.types.empty() ? "" : ", ", type.c_str(), gb((double)bytes).c_str());
  if (!types.native()) {
    m.source += " retyped as --type " + types.type;
    for (const std::string& o : types.tensor_types) m.source += " --tensor-type " + o;
  }
  if (!stacked.empty() && (m.n_expert <= 0 || m.n_expert_used <= 0))
    throw Error("plan: '" + path + "' has expert tensors but no " + a + "expert_count / expert_used_count");

  // KV and state.
  ModelConfig& c = m.kv;
  c.arch = m.arch;
  c.n_layer = m.n_layer;
  c.n_head = (int)f.get_int(a + "attention.head_count", 0);
  const int n_embd = (int)f.get_int(a + "embedding_length", 0);
  m.expert_row = (int)f.get_int(a + "expert_latent_length", 0) > 0 ? (int)f.get_int(a + "expert_latent_length", 0)
                                                                    : n_embd;
  std::vector<int64_t> kv_heads(m.n_layer, 0);
  if (const gguf::Value* v = f.find(a + "attention.head_count_kv"); v && v->is_array()) {
    if ((int)v->ints.size() != m.n_layer)
      throw Error("plan: " + a + "attention.head_count_kv has " + std::to_string(v->ints.size()) + " entries for " +
                  std::to_string(m.n_layer) + " layers");
    kv_heads = v->ints;
  } else {
    std::fill(kv_heads.begin(), kv_heads.end(), f.get_int(a + "attention.head_count_kv", c.n_head));
  }
  const bool mla = f.has(a + "attention.kv_lora_rank");
  std::vector<bool> is_attn(m.n_layer);
  for (int l = 0; l < m.n_layer; ++l) is_attn[l] = kv_heads[l] > 0;
  const bool hybrid = std::count(is_attn.begin(), is_attn.end(), false) > 0;
  if (f.has(a + "kda.head_dim")) {
    set_kimi_kv(c, is_attn, c.n_head, (int)f.get_int(a + "kda.head_dim"), (int)f.get_int(a + "ssm.conv_kernel"),
                (int)f.get_int(a + "attention.kv_lora_rank", 0), (int)f.get_int(a + "rope.dimension_count", 0));
    return m;
  }
  if (hybrid) {  // recurrent layers of a kind this plan cannot size
    m.state_known = false;
    c.layer_recurrent.assign(m.n_layer, 0);
    for (int l = 0; l < m.n_layer; ++l) c.layer_recurrent[l] = is_attn[l] ? 0 : 1;
  }
  if (mla) {
    c.mla.kv_lora_rank = (int)f.get_int(a + "attention.kv_lora_rank");
    c.rope.n_dims = (int)f.get_int(a + "rope.dimension_count", 0);
  } else {
    c.n_head_kv = (int)*std::max_element(kv_heads.begin(), kv_heads.end());
    const int head_dim = c.n_head > 0 ? n_embd / c.n_head : 0;
    c.head_dim_k = (int)f.get_int(a + "attention.key_length", head_dim);
    c.head_dim_v = (int)f.get_int(a + "attention.value_length", head_dim);
  }
  return m;
}

CostModel cost_model_kimi_k3(const std::string& type) {
  PlanTypes t;
  t.type = type;
  return cost_model_kimi_k3(t);
}

CostModel cost_model_kimi_k3(const PlanTypes& types) {
  const bool native = types.native();
  if (native && !types.tensor_types.empty()) throw Error("plan: --tensor-type needs a --type to start from");
  SynthOptions o;
  o.arch = "kimi-k3";
  o.preset = "kimi-k3";
  o.type = types.type == "native" ? "BF16" : types.type;
  o.tensor_types = types.tensor_types;
  const KimiK3Plan plan = plan_kimi_k3(o, find_kimi_k3_preset("kimi-k3")->real_vocab);
  const KimiK3Preset& s = plan.shape;
  CostModel m;
  m.source = "preset kimi-k3 (the released Kimi K3's shapes, no file)";
  m.arch = "kimi-k3";
  m.n_layer = s.n_layer;
  m.n_expert = s.n_expert;
  m.n_expert_used = s.n_expert_used;
  m.n_vocab = plan.n_vocab;
  m.expert_row = s.n_latent > 0 ? s.n_latent : s.n_embd;
  m.types = native ? "routed experts MXFP4, everything else BF16 (norms, conv, router F32), as the checkpoint ships"
                   : plan.type_rule;
  const DTypeTraits& mx = dtype_traits(DType::MXFP4);
  for (const K3Tensor& t : plan.tensors) {
    uint64_t bytes = t.bytes;
    if (native && t.routed_expert) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      bytes = (uint64_t)(n / mx.block_size) * mx.block_bytes;
    }
    m.tensors.push_back({t.name, bytes, t.layer, t.routed_expert});
  }
  std::vector<bool> is_mla(s.n_layer);
  for (int l = 0; l < s.n_layer; ++l) is_mla[l] = kimi_k3_is_mla_layer(s, l);
  m.kv.arch = "kimi-k3";
  m.kv.n_head = s.n_head;
  set_kimi_kv(m.kv, is_mla, s.n_head, s.kda_head_dim, s.conv_kernel, s.kv_lora_rank, s.qk_rope);
  return m;
}

uint64_t context_bytes(const ModelConfig& kv, int n_ctx) { return kv_bytes_estimate(kv, n_ctx, DType::F32); }

CostReport compute_cost(const CostModel& m, const PlanOptions& o) {
  if (o.n_ctx < 0 || o.n_prompt < 1 || o.n_chunk < 1) throw Error("plan: --ctx, --prompt and --chunk must be positive");
  if (o.nodes < 1 || !(o.net_bw > 0) || !(o.net_latency >= 0))
    throw Error("plan: --nodes must be at least 1, --net-bw positive and --net-latency not negative");
  if (!std::isnan(o.hit_rate) && !(o.hit_rate >= 0 && o.hit_rate <= 1)) throw Error("plan: --hit-rate must be in 0..1");
  if (!(o.device.read_bw > 0) || !(o.device.budget_bytes > 0)) throw Error("plan: the device needs RAM and a read bandwidth");
  CostReport r;
  std::map<int, uint64_t> expert_by_layer;  // layer -> bytes of one routed expert
  for (const CostTensor& t : m.tensors) {
    r.total += t.bytes;
    if (t.routed_expert) {
      r.experts_total += t.bytes;
      expert_by_layer[t.layer] += t.bytes / (uint64_t)std::max(1, m.n_expert);
      continue;
    }
    if (t.name == "token_embd.weight") {
      r.tok_output += m.n_vocab > 0 ? t.bytes / (uint64_t)m.n_vocab : t.bytes;  // one row per token
    } else if (t.layer < 0) {
      r.tok_output += t.bytes;  // output, output_norm, output_res_score
    } else if (contains(t.name, ".attn_") || contains(t.name, ".ssm_")) {
      r.tok_attention += t.bytes;
    } else if (contains(t.name, ".ffn_") || contains(t.name, ".exp_probs_b")) {
      r.tok_ffn += t.bytes;
    } else {
      r.tok_other += t.bytes;
    }
  }
  r.dense_total = r.total - r.experts_total;
  r.n_moe_layers = (int)expert_by_layer.size();
  uint64_t sum_expert = 0;
  for (const auto& [l, b] : expert_by_layer) sum_expert += b;
  r.expert_bytes = r.n_moe_layers ? sum_expert / (uint64_t)r.n_moe_layers : 0;
  r.tok_experts = (uint64_t)m.n_expert_used * sum_expert;

  // Context: one sequence's KV rows at n_ctx plus its recurrent state.
  r.state_per_seq = context_bytes(m.kv, 0);
  r.kv_per_token = context_bytes(m.kv, 1) - r.state_per_seq;
  r.kv_reserved = context_bytes(m.kv, o.n_ctx);

  // Placement as spool's streaming store: (k + 1) expert slots first, the
  // non-expert tensors as place_dense() puts them, more expert slots (the
  // expert cache) with what is left. token_embd is read a row at a time.
  r.budget = o.device.budget_bytes;
  const uint64_t for_weights = (uint64_t)std::max(0.0, r.budget - (double)r.kv_reserved);
  uint64_t max_expert = 0;
  for (const auto& [l, b] : expert_by_layer) max_expert = std::max(max_expert, b);
  const uint64_t expert_slot = round_page(max_expert), n_expert_units = (uint64_t)r.n_moe_layers * m.n_expert;
  const uint64_t expert_min = n_expert_units ? (uint64_t)(m.n_expert_used + 1) * expert_slot : 0;
  std::vector<uint64_t> dense_sizes;
  for (const CostTensor& t : m.tensors)
    if (!t.routed_expert && t.name != "token_embd.weight") dense_sizes.push_back(t.bytes);
  DensePlacement dp;
  if (for_weights >= expert_min) dp = place_dense(dense_sizes, for_weights - expert_min);
  r.fits_streaming_minimum = dp.ok;
  if (!dp.ok) {  // spool would refuse this budget; count everything as read
    dp.streamed = 0;
    for (uint64_t b : dense_sizes) dp.streamed += b;
    dp.resident = dp.tensor_slots = 0;
  }
  r.dense_streamed = (double)std::min<uint64_t>(dp.streamed, r.tok_dense());
  r.dense_resident = (double)r.tok_dense() - r.dense_streamed;
  r.tensor_slots = (double)dp.tensor_slots;
  const uint64_t left = dp.ok ? for_weights - dp.resident - dp.tensor_slots : 0;
  const uint64_t n_slots = expert_slot ? std::min<uint64_t>(left / expert_slot, n_expert_units) : 0;
  r.expert_cache = (double)(n_slots * expert_slot);
  r.cached_fraction = n_expert_units ? (double)n_slots / (double)n_expert_units : 1.0;
  r.hit_rate_given = !std::isnan(o.hit_rate);
  r.hit_rate = r.hit_rate_given ? o.hit_rate : r.cached_fraction;

  r.read_per_token = r.dense_streamed + (1.0 - r.hit_rate) * (double)r.tok_experts;
  r.decode_tok_s = r.read_per_token > 0 ? o.device.read_bw / r.read_per_token : INFINITY;
  if (o.nodes > 1) {
    // Each node caches and reads its 1/N of the experts (the same budget, the
    // same placement of the rest: the other nodes load the model as the home
    // node does); the home node also reads the streamed dense part. Reads and
    // the network are not overlapped (the home node waits for the answers).
    const double N_nodes = o.nodes;
    r.node_cached_fraction = n_expert_units ? std::min(1.0, (double)n_slots * N_nodes / (double)n_expert_units) : 1.0;
    const double hit = r.hit_rate_given ? o.hit_rate : r.node_cached_fraction;
    r.node_expert_read = (1.0 - hit) * (double)r.tok_experts / N_nodes;
    const double rows_away = m.n_expert_used * (N_nodes - 1) / N_nodes;  // per MoE layer and token
    r.net_bytes_per_token = 2.0 * r.n_moe_layers * rows_away * 4.0 * std::max(0, m.expert_row);
    r.net_s_per_token = r.net_bytes_per_token / o.net_bw + 2.0 * o.net_latency * r.n_moe_layers;
    r.read_per_token = r.dense_streamed + r.node_expert_read;
    const double s_per_token = r.read_per_token / o.device.read_bw + r.net_s_per_token;
    r.decode_tok_s = s_per_token > 0 ? 1.0 / s_per_token : INFINITY;
  }

  // Prefill: each chunk reads the streamed dense part once and the union of
  // the experts its tokens route to: N (1 - (1 - k/N)^c) per layer (uniform routing).
  const double N = std::max(1, m.n_expert), k = m.n_expert_used;
  for (int done = 0; done < o.n_prompt; done += o.n_chunk) {
    const int c = std::min(o.n_chunk, o.n_prompt - done);
    const double distinct = m.n_expert > 0 ? N * (1.0 - std::pow(1.0 - k / N, c)) : 0.0;
    if (done == 0) r.distinct_per_chunk = distinct;
    r.prefill_read += r.dense_streamed + (1.0 - r.hit_rate) * distinct * (double)sum_expert;
  }
  r.ttft_s = r.prefill_read / o.device.read_bw;

  auto& as = r.assumptions;
  as.push_back("storage-bound only: compute, memory bandwidth and I/O latency are not modelled, so tok/s is an "
               "upper bound and TTFT a lower bound");
  as.push_back("one sequence; KV and recurrent state reserved for --ctx " + std::to_string(o.n_ctx) +
               " tokens in F32 (spool's MLA cache and state type); activations and scratch not counted");
  as.push_back("placement as spool's streaming store: room for top-k + 1 expert slots, then non-expert tensors "
               "resident largest first with 3 tensor slots for the ones that stream, the rest of the budget as more "
               "expert slots (the expert cache); token_embd is read one row a token");
  if (!r.fits_streaming_minimum)
    as.push_back("the budget is below what spool's streaming store needs to start (it would refuse): every weight "
                 "counted as read");
  if (r.hit_rate_given)
    as.push_back(fmt("expert-cache hit rate %.3f as given (--hit-rate), for decode and prefill alike", r.hit_rate));
  else
    as.push_back("expert-cache hit rate = the cached share of all routed experts (uniform routing; K3's router is "
                 "trained for flat expert use): pass a measured rate with --hit-rate");
  as.push_back(fmt("TTFT: a %d-token prompt in chunks of %d; a chunk reads the streamed dense weights once and the union "
                   "of its tokens' experts, N(1 - (1 - k/N)^c) per layer, under the same hit rate",
                   o.n_prompt, o.n_chunk));
  if (!m.state_known) as.push_back("recurrent layers of this architecture are not sized here: state bytes missing");
  if (o.nodes > 1)
    as.push_back(fmt("--nodes %d (--dist ep): every node is this device; each caches and reads 1/%d of the experts "
                     "(hit rate its cached share unless --hit-rate); per MoE layer and token %.1f of the %d rows go to "
                     "other nodes and back as F32 (%d floats), one round trip of 2 x %.2f ms per MoE layer at %.0f MB/s; "
                     "reads and network add up (not overlapped); TTFT is the one-node figure",
                     o.nodes, o.nodes, m.n_expert_used * (o.nodes - 1.0) / o.nodes, m.n_expert_used, m.expert_row,
                     o.net_latency * 1e3, o.net_bw / 1e6));
  return r;
}

std::string describe_cost(const CostModel& m, const PlanOptions& o, const CostReport& r) {
  std::string out;
  out += "model: " + m.source + " (" + m.arch + ")\n";
  out += fmt("  layers %d (%d attention with KV, %d recurrent), routed experts %d top-%d in %d MoE layers, vocab %d\n",
             m.n_layer, m.kv.n_attn_layer(), m.n_layer - m.kv.n_attn_layer(), m.n_expert, m.n_expert_used,
             r.n_moe_layers, m.n_vocab);
  out += "  types: " + m.types + "\n";
  out += fmt("  total %s: routed experts %s (%.2f MiB each), everything else %s\n", gb((double)r.total).c_str(),
             gb((double)r.experts_total).c_str(), r.expert_bytes / 1048576.0, gb((double)r.dense_total).c_str());
  out += "per decoded token, nothing cached:\n";
  out += fmt("  attention (MLA / KDA projections, norms)   %s\n", gb((double)r.tok_attention).c_str());
  out += fmt("  feed-forward (dense, shared, latent, router) %s\n", gb((double)r.tok_ffn).c_str());
  out += fmt("  output + one token_embd row                %s\n", gb((double)r.tok_output + r.tok_other).c_str());
  out += fmt("  active routed experts (%d x %d layers)      %s\n", m.n_expert_used, r.n_moe_layers,
             gb((double)r.tok_experts).c_str());
  out += fmt("  total                                      %s\n", gb((double)r.tok_total()).c_str());
  out += "context (one sequence):\n";
  out += fmt("  KV per token %llu bytes; recurrent state %s (fixed); at --ctx %d: %s\n",
             (unsigned long long)r.kv_per_token, gb((double)r.state_per_seq).c_str(), o.n_ctx,
             gb((double)r.kv_reserved).c_str());
  out += "device: " + o.device.name + ": " + o.device.what + "\n";
  out += fmt("  RAM %.2f GiB, engine budget %.2f GiB, storage %.2f GB/s\n", o.device.ram_bytes / 1073741824.0,
             o.device.budget_bytes / 1073741824.0, o.device.read_bw / 1e9);
  out += fmt("  resident: non-expert weights %s of %s (%.0f%%), tensor slots %s, KV + state %s, expert cache %s "
             "(%.1f%% of experts)\n",
             gb(r.dense_resident).c_str(), gb((double)r.tok_dense()).c_str(),
             r.tok_dense() ? 100.0 * r.dense_resident / (double)r.tok_dense() : 100.0, gb(r.tensor_slots).c_str(),
             gb((double)r.kv_reserved).c_str(), gb(r.expert_cache).c_str(), 100 * r.cached_fraction);
  if (o.nodes > 1)
    out += fmt("  read per token (home node): streamed non-expert %s + its share of the experts %s / %d x (1 - hit %.3f) "
               "= %s\n", gb(r.dense_streamed).c_str(), gb((double)r.tok_experts).c_str(), o.nodes,
               r.hit_rate_given ? o.hit_rate : r.node_cached_fraction, gb(r.read_per_token).c_str());
  else
    out += fmt("  read per token: streamed non-expert %s + experts %s x (1 - hit %.3f) = %s\n",
               gb(r.dense_streamed).c_str(), gb((double)r.tok_experts).c_str(), r.hit_rate, gb(r.read_per_token).c_str());
  if (o.nodes > 1)
    out += fmt("  %d nodes (--dist ep): each caches %.1f%% of its share of the experts and reads %s of experts per token "
               "in parallel; network %.1f MB per token, %.3f s with the round trips\n",
               o.nodes, 100 * r.node_cached_fraction, gb(r.node_expert_read).c_str(), r.net_bytes_per_token / 1e6,
               r.net_s_per_token);
  if (std::isinf(r.decode_tok_s))
    out += "  decode: nothing read from storage per token (memory/compute bound; not projected here)\n";
  else
    out += fmt("  decode: %.3f tok/s (%.2f s/token) at the storage bound%s\n", r.decode_tok_s, 1.0 / r.decode_tok_s,
               o.nodes > 1 ? " plus the network" : "");
  out += fmt("  TTFT (%d-token prompt, chunks of %d, %.0f distinct experts per layer per chunk): reads %s, %.1f s\n",
             o.n_prompt, o.n_chunk, r.distinct_per_chunk, gb(r.prefill_read).c_str(), r.ttft_s);
  out += "assumptions:\n";
  for (const std::string& a : r.assumptions) out += "  - " + a + "\n";
  return out;
}

std::vector<ContextRow> context_comparison(const CostModel& k3, const std::vector<int>& contexts) {
  std::vector<ContextRow> rows;
  auto row = [&](const std::string& name, const ModelConfig& c, DType type) {
    ContextRow r;
    r.model = name;
    r.fixed = kv_bytes_estimate(c, 0, type);
    r.per_token = kv_bytes_estimate(c, 1, type) - r.fixed;
    for (int n : contexts) r.at.push_back(kv_bytes_estimate(c, n, type));
    rows.push_back(std::move(r));
  };
  const ModelConfig& c = k3.kv;
  row(fmt("%s as is: %d MLA + %d KDA layers", k3.arch.c_str(), c.n_attn_layer(), c.n_layer - c.n_attn_layer()), c,
      DType::F32);
  ModelConfig all_mla = c;
  all_mla.layer_recurrent.clear();
  all_mla.recurrent = RecurrentShape{};
  row(fmt("same, every layer MLA (%d layers, latent %d + rope %d)", c.n_layer, c.mla.kv_lora_rank, c.rope.n_dims),
      all_mla, DType::F32);
  ModelConfig gqa;
  gqa.n_layer = c.n_layer;
  gqa.n_head_kv = 8;
  gqa.head_dim_k = gqa.head_dim_v = 128;
  row(fmt("GQA, %d layers x 8 KV heads x 128, F32", c.n_layer), gqa, DType::F32);
  row(fmt("GQA, %d layers x 8 KV heads x 128, F16", c.n_layer), gqa, DType::F16);
  return rows;
}

std::string describe_context_comparison(const std::vector<ContextRow>& rows, const std::vector<int>& contexts) {
  std::string out = "| model | KV bytes per token | fixed state |";
  for (int n : contexts) out += fmt(" at %dk |", n / 1024);
  out += "\n|---|---|---|";
  for (size_t i = 0; i < contexts.size(); ++i) out += "---|";
  out += "\n";
  for (const ContextRow& r : rows) {
    out += fmt("| %s | %llu | %.1f MB |", r.model.c_str(), (unsigned long long)r.per_token, r.fixed / 1e6);
    for (uint64_t b : r.at) out += fmt(" %.2f GB |", b / 1e9);
    out += "\n";
  }
  return out;
}

}  // namespace spool
