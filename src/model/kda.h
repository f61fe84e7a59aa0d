// Kimi Delta Attention (Kimi Linear, Kimi K3): a linear-attention layer with
// a fixed-size per-sequence state. q, k, v come from their projections
// through a short causal conv + SiLU; q and k are L2-normalised per head; a
// per-key-channel forget gate g and a per-head beta drive the gated delta rule
// (model/delta_rule.h) over the state S [head_dim][head_dim] of every head;
// the output is RMS-normed per head, gated by a sigmoid and projected back.
// Kimi Linear: g = -exp(A_log) * softplus(f_b f_a x + dt_bias) and a low-rank
// output gate g_b g_a x. K3: g = lb * sigmoid(exp(A_log) * (f_b f_a x + dt_bias))
// and a full-rank output gate ssm_g x.
#pragma once

#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/delta_rule_chunked.h"
#include "model/kv_cache.h"
#include "weights/weight_store.h"

namespace spool {

class ThreadPool;

struct KdaLayerWeights {
  const TensorEntry *q = nullptr, *k = nullptr, *v = nullptr;  // attn_q/k/v [n_embd, d_inner]
  const TensorEntry *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr;  // ssm_conv1d_* [K, 1, d_inner]
  const TensorEntry *f_a = nullptr, *f_b = nullptr;  // ssm_f_a [n_embd, head_dim], ssm_f_b [head_dim, d_inner]
  const TensorEntry* beta = nullptr;                 // ssm_beta [n_embd, n_head]
  const TensorEntry* a = nullptr;                    // ssm_a [n_head]: -exp(A_log) (GGUF) or A_log itself (HF)
  bool a_is_log = false;
  const TensorEntry* dt_bias = nullptr;              // ssm_dt.bias [d_inner]
  const TensorEntry *g_a = nullptr, *g_b = nullptr;  // Kimi Linear: ssm_g_a [n_embd, head_dim], ssm_g_b [head_dim, d_inner]
  const TensorEntry* g = nullptr;                    // K3: ssm_g [n_embd, d_inner]
  const TensorEntry* norm = nullptr;                 // ssm_norm [head_dim]
  const TensorEntry* wo = nullptr;                   // attn_output [d_inner, n_embd]
};

// Finds and shape-checks layer `prefix` ("blk.N.")'s KDA tensors.
KdaLayerWeights load_kda_weights(const Manifest& m, const std::string& prefix, const ModelConfig& cfg);
// The layer's matmul weights, for WeightStore::prepare_matmul_weights.
std::vector<const TensorEntry*> kda_matmul_weights(const KdaLayerWeights& w);
// Floats of conv state (q, k and v histories) and delta-rule state of one KDA layer, per sequence.
int64_t kda_conv_floats(const ModelConfig& cfg);
int64_t kda_ssm_floats(const ModelConfig& cfg);

// Activation buffers shared by every KDA layer of a model.
struct KdaScratch {
  std::vector<float> q, k, v, f, gate, beta, o, low;
  std::vector<uint8_t> mm;
  std::vector<DeltaRuleScratch> dr;  // per pool thread
};

// Tokens per chunk of the chunked delta rule (model/delta_rule_chunked.h) in prefill; decode steps are chunks of one.
constexpr int kKdaChunk = 64;

// xn: [n_tokens, n_embd] normed input; out: [n_tokens, n_embd]. Reads and
// advances the recurrent state of model layer `layer` for the batch's
// sequences; a sequence's tokens must come in position order (the model
// checks they continue its state).
void kda_forward(WeightStore& store, ThreadPool& pool, const ModelConfig& cfg, const KdaLayerWeights& w,
                 RecurrentState& state, int layer, const Batch& batch, const float* xn, float* out, KdaScratch& s);

}  // namespace spool
