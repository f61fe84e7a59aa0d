// Gated DeltaNet hybrids' shape from GGUF metadata (see the header).
#include "model/gdn_config.h"

#include <algorithm>

#include "core/error.h"
#include "format/hf_hybrid.h"

namespace spool {
namespace {

int key_int(const gguf::File& f, const std::string& key) {
  const int64_t v = f.get_int(key, 0);
  if (v <= 0) throw Error("model metadata: '" + key + "' must be a positive integer");
  return (int)v;
}

// Which layers are linear attention: attention.recurrent_layers, else every
// layer but each full_attention_interval-th (llama.cpp's rule).
std::vector<uint8_t> recurrent_layers(const gguf::File& f, const std::string& a, int n_layer) {
  std::vector<uint8_t> out(n_layer);
  if (const gguf::Value* v = f.find(a + "attention.recurrent_layers")) {
    if (!v->is_array() || (int)v->ints.size() < n_layer)
      throw Error("model metadata: '" + a + "attention.recurrent_layers' must hold one flag per layer");
    for (int l = 0; l < n_layer; ++l) out[l] = v->ints[l] != 0;
    return out;
  }
  const int every = (int)f.get_int(a + "full_attention_interval", 4);
  if (every <= 0) throw Error("model metadata: full_attention_interval must be positive");
  for (int l = 0; l < n_layer; ++l) out[l] = (l + 1) % every != 0;
  return out;
}

}  // namespace

bool is_gdn_arch(const std::string& arch) { return arch == "qwen3next" || arch == "qwen35moe"; }

GdnShape read_gdn_shape(const gguf::File& f, ModelConfig& c, bool v_grouped_default) {
  const std::string a = c.arch + ".";
  GdnShape g;
  g.conv_k = key_int(f, a + "ssm.conv_kernel");
  g.dk = key_int(f, a + "ssm.state_size");
  g.n_k = key_int(f, a + "ssm.group_count");
  g.n_v = key_int(f, a + "ssm.time_step_rank");
  const int inner = key_int(f, a + "ssm.inner_size");
  if (inner % g.n_v != 0 || g.n_v % g.n_k != 0)
    throw Error("model metadata: ssm.inner_size " + std::to_string(inner) + " / time_step_rank " +
                std::to_string(g.n_v) + " / group_count " + std::to_string(g.n_k) + " do not divide");
  g.dv = inner / g.n_v;
  g.v_grouped = f.get_bool(hf::kGdnVHeadsGroupedKey, v_grouped_default);
  c.layer_recurrent = recurrent_layers(f, a, c.n_layer);
  c.recurrent.conv_floats.assign(c.n_layer, 0);
  c.recurrent.ssm_floats.assign(c.n_layer, 0);
  for (int l = 0; l < c.n_layer; ++l) {
    if (!c.layer_recurrent[l]) continue;
    c.recurrent.conv_floats[l] = (int64_t)(g.conv_k - 1) * g.conv_dim();
    c.recurrent.ssm_floats[l] = (int64_t)g.n_v * g.dk * g.dv;
  }
  return g;
}

uint64_t gdn_scratch_bytes(const gguf::File& f, const ModelConfig& c, int n_tokens) {
  if (!is_gdn_arch(c.arch)) return 0;
  ModelConfig shape_of = c;
  const GdnShape g = read_gdn_shape(f, shape_of, true);
  const uint64_t n = (uint64_t)std::max(1, n_tokens), K = g.key_dim(), V = g.value_dim(), C = g.conv_dim(),
                 nv = g.n_v, ff_sh = (uint64_t)f.get_int(c.arch + ".expert_shared_feed_forward_length", c.n_ff);
  const uint64_t fused = 2 * K + 2 * V;  // mixed_ (and seq_conv_ when it holds the fused qkvz projection)
  const uint64_t per_token = fused + V + 2 * nv + 2 * nv  // mixed_, z_, ba_, gdecay_ + beta_
                             + C + std::max(C, fused) + V + 2 * nv + V  // seq_in_, seq_conv_, seq_o_, seq_g_/b_, o_
                             + 2 * ff_sh + (uint64_t)c.n_embd  // the shared expert's gate/up and output
                             + 3 * (uint64_t)c.q_dim();          // the gated attention's q + gate and gate
  const uint64_t L = 64, dk = g.dk, dv = g.dv;  // L: the delta rule's chunk (gdn_model's default)
  const uint64_t per_thread = L + 2 * L * dk + 2 * L * dv + L * dv + 2 * L * L + L;
  return (n * per_token + 64 * per_thread) * sizeof(float);
}

}  // namespace spool
