// Gated DeltaNet hybrids (Qwen3-Next: GGUF "qwen3next"; Qwen3.5-MoE:
// "qwen35moe"): layers of linear attention with a per-sequence recurrent
// state (short causal conv + SiLU, L2-normalised q/k, the gated delta rule,
// a gated RMSNorm) and every n-th layer gated full attention (sigmoid output
// gate from the Q projection, per-head Q/K norms, partial rotary), each
// followed by a mixture of experts with a sigmoid-gated shared expert. The
// blocks live here; each architecture file composes them in its forward().
#pragma once

#include <vector>

#include "model/delta_rule_chunked.h"
#include "model/gdn_config.h"
#include "model/llama_family.h"

namespace spool {

struct GdnLayerWeights {
  const TensorEntry* attn_norm = nullptr;   // [n_embd]
  const TensorEntry* post_norm = nullptr;   // [n_embd] before the feed-forward
  // Full-attention layers.
  const TensorEntry* wq = nullptr;          // [n_embd, 2 * n_head * head_dim]: per head, q then its gate
  const TensorEntry *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const TensorEntry *q_norm = nullptr, *k_norm = nullptr;
  // Linear-attention layers: ssm_in ([q k v z] per key head, Qwen3-Next
  // checkpoints) or qkv + gate; ssm_ba ([b a] per key head) or beta + alpha.
  const TensorEntry *ssm_in = nullptr, *qkv = nullptr, *gate = nullptr;
  const TensorEntry *ssm_ba = nullptr, *beta = nullptr, *alpha = nullptr;
  const TensorEntry* conv = nullptr;        // [conv_k, conv_dim] F32
  const TensorEntry *dt = nullptr, *a = nullptr;  // [n_v] F32: dt bias, A = -exp(A_log)
  const TensorEntry* ssm_norm = nullptr;    // [dv] F32
  const TensorEntry* ssm_out = nullptr;     // [value_dim, n_embd]
  // Feed-forward: routed experts, and a shared expert scaled by sigmoid(x . shared_gate).
  MoeLayerWeights moe;
  const TensorEntry *sh_gate = nullptr, *sh_up = nullptr, *sh_down = nullptr, *sh_gate_inp = nullptr;
};

class GatedDeltaNetModel : public LlamaFamilyModel {
 public:
  // v_grouped_default: the value-head order of this architecture's GGUF files.
  GatedDeltaNetModel(ModelParts parts, bool v_grouped_default);

  // Tokens per chunk of the chunked delta rule in prefill (tests vary it; 1 is the recurrent form).
  static void set_chunk_size(int n);

 protected:
  // out: [n, n_embd] from xn, the normed input, for layer l of this batch.
  void attention_layer(int l, const Batch& batch, KvCache& kv, const float* xn, float* out);
  void linear_attention_layer(int l, const Batch& batch, KvCache& kv, const float* xn, float* out);
  void ffn(int l, const float* xn, float* out, int n);
  // After every layer has run: each sequence's state has folded in its batch rows.
  void advance_states(const Batch& batch, KvCache& kv);
  void grow(int n);

  GdnShape g_;
  int n_ff_shexp_ = 0;
  std::vector<GdnLayerWeights> layers_;

 private:
  void project_gdn(const GdnLayerWeights& L, const float* xn, int n);
  void run_sequence(int l, const GdnLayerWeights& L, RecurrentState& rs, int seq, const std::vector<int>& rows,
                    bool stepwise);
  // Buffers, grown as needed (shapes in gdn_model.cpp).
  std::vector<float> qg_, gate_, mixed_, z_, ba_, gdecay_, beta_, seq_in_, seq_conv_, seq_o_, seq_g_, seq_b_, o_;
  std::vector<float> conv_w_, dt_, a_, sh_g_, sh_u_, sh_s_;
  std::vector<DeltaRuleScratch> dr_scratch_;  // per pool thread
};

}  // namespace spool
