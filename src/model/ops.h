// Transformer building blocks on float activations laid out [n_tokens, dim]:
// RMSNorm, rotary position embedding, SwiGLU, residual add, and batched causal
// attention over the KV cache. Scalar-clear code; the heavy lifting (matmul) is
// in kernels/matmul.
#pragma once

#include <cstdint>
#include <vector>

#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace spool {

class ThreadPool;

// out[t] = x[t] / rms(x[t]) * w   (w may be null: no weight). out may alias x.
void rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int dim, float eps);

// Rotates the first rope.n_dims of each head in place. x: [n_tokens, n_heads * head_dim].
// freq_factors (may be null): per-pair divisors of the frequency (Llama 3.1 style).
void rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* pos, const RopeConfig& rope,
          const float* freq_factors);

// g[i] = silu(g[i]) * u[i]
void swiglu(float* g, const float* u, int64_t n);
// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t n);
// x[t, :] += b  for each row
void add_bias(float* x, const float* b, int64_t n_rows, int dim);

// Writes this batch's K and V rows into the cache at their (seq, pos); v may be
// null when the cache has no V rows (MLA).
void kv_store(KvCache& kv, int layer, const Batch& batch, const float* k, const float* v);

// Causal attention: for each token, its heads attend to cache positions
// [0, pos] of its own sequence. q: [n_tokens, n_head * head_dim_k],
// out: [n_tokens, n_head * head_dim_v]. The cache must already hold the batch's K/V.
void attention(ThreadPool& pool, const ModelConfig& cfg, KvCache& kv, int layer, const Batch& batch,
               const float* q, float* out, float kq_scale);

}  // namespace spool
