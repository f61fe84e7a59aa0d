// Reference-quality implementations of the non-matmul transformer ops.
#include "model/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace spool {

void rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int dim, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += (double)xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt((float)(ss / dim) + eps);
    if (w) for (int i = 0; i < dim; ++i) o[i] = xr[i] * scale * w[i];
    else for (int i = 0; i < dim; ++i) o[i] = xr[i] * scale;
  }
}

namespace {

// YaRN: fraction of extrapolation for dimension pair i0/2 (1 = keep original frequency).
float yarn_ramp(float low, float high, int i0) {
  const float y = (i0 / 2 - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * std::log(base));
}

}  // namespace

void rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* pos, const RopeConfig& rc,
          const float* freq_factors) {
  const int n_dims = rc.n_dims;
  const float theta_scale = std::pow(rc.freq_base, -2.0f / n_dims);
  float corr_lo = 0, corr_hi = 0;
  if (rc.ext_factor != 0.0f) {
    corr_lo = std::max(0.0f, std::floor(yarn_corr_dim(n_dims, rc.n_ctx_orig, rc.beta_fast, rc.freq_base)));
    corr_hi = std::min((float)n_dims - 1, std::ceil(yarn_corr_dim(n_dims, rc.n_ctx_orig, rc.beta_slow, rc.freq_base)));
  }
  std::vector<float> cos_t(n_dims / 2), sin_t(n_dims / 2);
  for (int64_t t = 0; t < n_tokens; ++t) {
    // Angles for this position (shared by all heads).
    float theta_extrap = (float)pos[t];
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
      const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
      const float te = theta_extrap / ff;
      const float ti = rc.freq_scale * te;
      float theta = ti, mscale = rc.attn_factor;
      if (rc.ext_factor != 0.0f) {
        const float mix = yarn_ramp(corr_lo, corr_hi, i0) * rc.ext_factor;
        theta = ti * (1 - mix) + te * mix;
        mscale *= 1.0f + 0.1f * std::log(1.0f / rc.freq_scale);
      }
      cos_t[i0 / 2] = std::cos(theta) * mscale;
      sin_t[i0 / 2] = std::sin(theta) * mscale;
      theta_extrap *= theta_scale;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * (int64_t)head_dim;
      for (int i = 0; i < n_dims / 2; ++i) {
        // Normal: pairs (2i, 2i+1). NeoX: pairs (i, i + n_dims/2).
        const int a = rc.style == RopeStyle::Normal ? 2 * i : i;
        const int b = rc.style == RopeStyle::Normal ? 2 * i + 1 : i + n_dims / 2;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cos_t[i] - x1 * sin_t[i];
        v[b] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

void swiglu(float* g, const float* u, int64_t n) { kernels().rows.swiglu(g, u, n); }

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void add_bias(float* x, const float* b, int64_t n_rows, int dim) {
  for (int64_t r = 0; r < n_rows; ++r) add_inplace(x + r * dim, b, dim);
}

void kv_store(KvCache& kv, int layer, const Batch& batch, const float* k, const float* v) {
  const KvShape& s = kv.shape();
  std::map<int, KvSeqView> views;
  for (int t = 0; t < batch.size(); ++t) {
    auto it = views.find(batch.seq[t]);
    if (it == views.end()) it = views.emplace(batch.seq[t], kv.view(layer, batch.seq[t])).first;
    if (s.type == DType::F16) {
      const QuantizeRowFn to_f16 = kernels()[DType::F16].quantize;
      to_f16(k + (size_t)t * s.k_row(), it->second.k16(batch.pos[t]), s.k_row());
      if (s.v_row() > 0) to_f16(v + (size_t)t * s.v_row(), it->second.v16(batch.pos[t]), s.v_row());
      continue;
    }
    std::memcpy(it->second.k(batch.pos[t]), k + (size_t)t * s.k_row(), s.k_row() * sizeof(float));
    if (s.v_row() > 0)  // MLA caches no V row
      std::memcpy(it->second.v(batch.pos[t]), v + (size_t)t * s.v_row(), s.v_row() * sizeof(float));
  }
}

void attention(ThreadPool& pool, const ModelConfig& cfg, KvCache& kv, int layer, const Batch& batch,
               const float* q, float* out, float kq_scale) {
  const int n_tokens = batch.size();
  const int hd_k = cfg.head_dim_k, hd_v = cfg.head_dim_v;
  const int group = cfg.n_head / cfg.n_head_kv;
  // A task is a run of up to kRowsPerTask consecutive rows of one sequence (a
  // prefill chunk, a decode token and its draft) and up to kHeadsPerTask
  // query heads of one KV head: the kernels read each cached row once for
  // all of them. Every row's numbers are those it gets alone: its scores and
  // its weighted sum over positions 0..pos in order, whatever it was grouped with.
  constexpr int kHeadsPerTask = 4, kRowsPerTask = 8;
  const int chunks_per_kv = (group + kHeadsPerTask - 1) / kHeadsPerTask;
  std::map<int, KvSeqView> views;
  for (int t = 0; t < n_tokens; ++t)
    if (!views.count(batch.seq[t])) views.emplace(batch.seq[t], kv.view(layer, batch.seq[t]));
  std::vector<int> row0;  // first batch row of each run
  for (int t = 0; t < n_tokens; ++t)
    if (row0.empty() || t - row0.back() >= kRowsPerTask || batch.seq[t] != batch.seq[t - 1] ||
        batch.pos[t] != batch.pos[t - 1] + 1)
      row0.push_back(t);
  const int n_runs = (int)row0.size();
  row0.push_back(n_tokens);
  int max_pos = 0;
  for (int t = 0; t < n_tokens; ++t) max_pos = std::max(max_pos, batch.pos[t]);
  const size_t s_stride = (size_t)max_pos + 1;
  constexpr int kQueries = kHeadsPerTask * kRowsPerTask;
  std::vector<std::vector<float>> scores(pool.size(), std::vector<float>(kQueries * s_stride));
  std::vector<std::vector<float>> qs(pool.size(), std::vector<float>((size_t)kQueries * hd_k));
  std::vector<std::vector<float>> os(pool.size(), std::vector<float>((size_t)kQueries * hd_v));

  // Per task: scores over the cached positions (contiguous runs inside cache
  // blocks), softmax per row and head, then the weighted sums of values: over
  // the positions every row of the run sees together, then each row's own.
  const RowKernels& rk = kernels().rows;
  const bool f16 = kv.shape().type == DType::F16;
  auto dot = [&](const KvSeqView& view, int hk, const float* qv, int n_q, int p_begin, int p_end, float* s) {
    for (int p0 = p_begin, run; p0 < p_end; p0 += run) {
      run = std::min(p_end - p0, view.block_size - p0 % view.block_size);
      if (f16)
        rk.dot_rows_multi_f16(hd_k, qv, n_q, view.k16(p0) + (size_t)hk * hd_k, view.k_row, run, s + p0, s_stride);
      else
        rk.dot_rows_multi(hd_k, qv, n_q, view.k(p0) + (size_t)hk * hd_k, view.k_row, run, s + p0, s_stride);
    }
  };
  auto axpy = [&](const KvSeqView& view, int hk, const float* s, int n_q, int p_begin, int p_end, float* o) {
    for (int p0 = p_begin, run; p0 < p_end; p0 += run) {
      run = std::min(p_end - p0, view.block_size - p0 % view.block_size);
      if (f16)
        rk.axpy_rows_multi_f16(hd_v, s + p0, s_stride, n_q, view.v16(p0) + (size_t)hk * hd_v, view.v_row, run, o);
      else
        rk.axpy_rows_multi(hd_v, s + p0, s_stride, n_q, view.v(p0) + (size_t)hk * hd_v, view.v_row, run, o);
    }
  };
  pool.run((int64_t)n_runs * cfg.n_head_kv * chunks_per_kv, [&](int64_t task, int thread) {
    const int r = (int)(task / ((int64_t)cfg.n_head_kv * chunks_per_kv));
    const int rest = (int)(task % ((int64_t)cfg.n_head_kv * chunks_per_kv));
    const int hk = rest / chunks_per_kv, h0 = hk * group + (rest % chunks_per_kv) * kHeadsPerTask;
    const int nh = std::min(kHeadsPerTask, (hk + 1) * group - h0);
    const int t0 = row0[r], nt = row0[r + 1] - t0, nq = nt * nh;
    const KvSeqView& view = views.at(batch.seq[t0]);
    float* qsc = qs[thread].data();  // the queries (row-major: row, head) with kq_scale applied
    for (int i = 0; i < nt; ++i) {
      const float* qh = q + ((size_t)(t0 + i) * cfg.n_head + h0) * hd_k;
      for (int j = 0; j < nh * hd_k; ++j) qsc[(size_t)i * nh * hd_k + j] = qh[j] * kq_scale;
    }
    // Row i sees positions [0, first + i]; the run's rows see [0, first] together.
    const int first = batch.pos[t0] + 1, last = batch.pos[t0 + nt - 1] + 1;
    float* s = scores[thread].data();
    dot(view, hk, qsc, nq, 0, last, s);
    float inv[kQueries];
    for (int i = 0; i < nt; ++i)
      for (int h = 0; h < nh; ++h) {
        float* sh = s + (size_t)(i * nh + h) * s_stride;
        const int n_pos = first + i;
        inv[i * nh + h] = 1.0f / rk.exp_sum(sh, n_pos, *std::max_element(sh, sh + n_pos));
      }
    float* o = os[thread].data();
    std::fill(o, o + (size_t)nq * hd_v, 0.0f);
    axpy(view, hk, s, nq, 0, first, o);
    for (int i = 1; i < nt; ++i)
      axpy(view, hk, s + (size_t)i * nh * s_stride, nh, first, first + i, o + (size_t)i * nh * hd_v);
    for (int i = 0; i < nt; ++i) {
      float* dst = out + ((size_t)(t0 + i) * cfg.n_head + h0) * hd_v;  // the nh heads' outputs, contiguous
      for (int h = 0; h < nh; ++h)
        for (int j = 0; j < hd_v; ++j) dst[h * hd_v + j] = o[((size_t)i * nh + h) * hd_v + j] * inv[i * nh + h];
    }
  });
}

}  // namespace spool
