// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2). Each token's keys and
// values are compressed into one kv_lora_rank-wide latent plus one rope key
// shared by all heads; the KV cache stores only that row. Two equivalent forms:
// plain (decompress every cached latent into per-head K and V with kv_b, then
// ordinary attention) and absorbed (fold kv_b's K half into the query and its V
// half into the output, so attention runs in latent space over the cache rows).
#pragma once

#include <cstdint>
#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "weights/weight_store.h"

namespace spool {

class ThreadPool;

struct MlaLayerWeights {
  const TensorEntry* q = nullptr;          // attn_q    [n_embd, n_head * head_dim_k]   (no q-LoRA)
  const TensorEntry* q_a = nullptr;        // attn_q_a  [n_embd, q_lora_rank]
  const TensorEntry* q_a_norm = nullptr;   //           [q_lora_rank]
  const TensorEntry* q_b = nullptr;        // attn_q_b  [q_lora_rank, n_head * head_dim_k]
  const TensorEntry* kv_a = nullptr;       // attn_kv_a_mqa [n_embd, kv_lora_rank + n_rope]
  const TensorEntry* kv_a_norm = nullptr;  //           [kv_lora_rank]
  // The up-projection, either whole (HF, older GGUFs) or split per head as
  // llama.cpp's converter writes it for the absorbed form.
  const TensorEntry* kv_b = nullptr;       // attn_kv_b [kv_lora_rank, n_head * (n_nope + head_dim_v)]
  const TensorEntry* k_b = nullptr;        // attn_k_b  [n_nope, kv_lora_rank, n_head]
  const TensorEntry* v_b = nullptr;        // attn_v_b  [kv_lora_rank, head_dim_v, n_head]
  const TensorEntry* wo = nullptr;         // attn_output [n_head * head_dim_v, n_embd]
  // Kimi K3: optional sigmoid gate on the attention output (the model loads it).
  const TensorEntry* gate = nullptr;       // attn_gate [n_embd, n_head * head_dim_v]
};

// Finds and shape-checks layer `prefix` ("blk.N.")'s attention tensors.
MlaLayerWeights load_mla_weights(const Manifest& m, const std::string& prefix, const ModelConfig& cfg);

// The softmax scale: 1/sqrt(head_dim_k), times DeepSeek YaRN's mscale squared.
float mla_kq_scale(const ModelConfig& cfg);

// Activation buffers of MLA attention, grown as needed and shared by every
// layer of a model (layers run one after another): per batch token they hold
// q, the q-LoRA latent, the cache row, the rope part of q and the attention
// output; the absorbed form's per-head latent queries and outputs (the widest,
// n_head x (kv_lora_rank + n_rope) and n_head x kv_lora_rank floats a token)
// are held for kMlaTokenChunk tokens at a time only.
struct MlaScratch {
  std::vector<float> qa, q, kva, att, qh, qlat, olat, oh, lat, kn, vv, gate;  // see MlaAttention::forward()
  std::vector<uint8_t> mm;
};

// Tokens whose latent queries the absorbed form holds at once (see MlaScratch).
constexpr int kMlaTokenChunk = 32;

// One layer's attention (its buffers in a shared MlaScratch) and the float
// transposes of kv_b's K half that a form needs but the file does not store
// (made once, per layer).
class MlaAttention {
 public:
  MlaAttention(const ModelConfig& cfg, const MlaLayerWeights& w, MlaScratch& s) : c_(cfg), w_(w), s_(&s) {}

  // xn: [n_tokens, n_embd] normed input; out: [n_tokens, n_embd] (attn_output applied).
  // Writes the batch's cache rows for `layer` first.
  void forward(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch, const float* xn,
               float* out, MlaForm form);

 private:
  void project_q(WeightStore& store, ThreadPool& pool, const float* xn, int n);
  void project_kv(WeightStore& store, ThreadPool& pool, const Batch& batch, const float* xn);
  void attend_absorbed(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch);
  void attend_plain(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch);
  // Per-head views of the up-projection: K half as [n_nope rows, kv_lora cols]
  // (plain) or [kv_lora rows, n_nope cols] (absorbed); V half [head_dim_v rows, kv_lora cols].
  MatView k_up(const WeightRef& r, int h);
  MatView k_up_t(const WeightRef& r, int h);
  MatView v_up(const WeightRef& r, int h) const;

  const ModelConfig& c_;
  MlaLayerWeights w_;
  std::vector<float> k_up_copy_, k_up_t_copy_;  // [n_head, n_nope, kv_lora] / [n_head, kv_lora, n_nope]
  MlaScratch* s_;
};

}  // namespace spool
