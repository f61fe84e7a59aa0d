// Multi-head latent attention: projections, the latent cache row, and the
// plain and absorbed attention forms (see mla.h).
#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/kernels.h"
#include "core/matmul.h"
#include "core/thread_pool.h"
#include "model/ops.h"

namespace spool {

MlaLayerWeights load_mla_weights(const Manifest& m, const std::string& p, const ModelConfig& c) {
  const MlaConfig& a = c.mla;
  const int64_t H = c.n_head, dk = a.head_dim_k, dv = a.head_dim_v, L = a.kv_lora_rank, r = c.rope.n_dims;
  const int64_t nope = dk - r;
  MlaLayerWeights w;
  if (a.q_lora_rank > 0) {
    w.q_a = &expect_tensor(m, p + "attn_q_a.weight", {c.n_embd, a.q_lora_rank});
    w.q_a_norm = &expect_tensor(m, p + "attn_q_a_norm.weight", {a.q_lora_rank});
    w.q_b = &expect_tensor(m, p + "attn_q_b.weight", {a.q_lora_rank, H * dk});
  } else {
    w.q = &expect_tensor(m, p + "attn_q.weight", {c.n_embd, H * dk});
  }
  w.kv_a = &expect_tensor(m, p + "attn_kv_a_mqa.weight", {c.n_embd, L + r});
  w.kv_a_norm = &expect_tensor(m, p + "attn_kv_a_norm.weight", {L});
  w.kv_b = optional_tensor(m, p + "attn_kv_b.weight", {L, H * (nope + dv)});
  if (!w.kv_b) {
    w.k_b = &expect_tensor(m, p + "attn_k_b.weight", {nope, L, H});
    w.v_b = &expect_tensor(m, p + "attn_v_b.weight", {L, dv, H});
  }
  w.wo = &expect_tensor(m, p + "attn_output.weight", {H * dv, c.n_embd});
  for (const TensorEntry* t : {w.q_a_norm, w.kv_a_norm})
    if (t && t->type != DType::F32) throw Error("tensor '" + t->name + "' must be F32, is " + dtype_name(t->type));
  return w;
}

float mla_kq_scale(const ModelConfig& c) {
  float scale = 1.0f / std::sqrt((float)c.mla.head_dim_k);
  // transformers: softmax_scale * yarn_get_mscale(factor, mscale_all_dim)^2.
  if (c.rope.scaling == RopeScaling::Yarn && c.rope.yarn_log_mul != 0.0f && c.rope.freq_scale < 1.0f) {
    const float mscale = 1.0f + c.rope.yarn_log_mul * std::log(1.0f / c.rope.freq_scale);
    scale *= mscale * mscale;
  }
  return scale;
}

namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Rows [row0, row0 + n_rows) of w as a matrix of its own (no packed copy).
MatView row_range(const MatView& w, int64_t n_cols, int64_t row0, int64_t n_rows) {
  if (n_cols == w.n_cols) return row_slice(w, row0, n_rows);  // keeps FP8 block scales
  MatView m;
  m.type = w.type;
  m.n_cols = n_cols;
  m.n_rows = n_rows;
  m.data = (const uint8_t*)w.data + row0 * row_bytes(w.type, n_cols);
  return m;
}

MatView f32_view(const float* data, int64_t n_cols, int64_t n_rows) {
  MatView m;
  m.type = DType::F32;
  m.data = data;
  m.n_cols = n_cols;
  m.n_rows = n_rows;
  return m;
}

// out[c * src.n_rows + r] = src[r, c]: the transpose of src as floats.
void transpose_to_f32(const MatView& src, float* out) {
  std::vector<float> row(src.n_cols);
  for (int64_t r = 0; r < src.n_rows; ++r) {
    get_row(src, r, row.data());
    for (int64_t c = 0; c < src.n_cols; ++c) out[c * src.n_rows + r] = row[c];
  }
}

// Copies column block [col0, col0 + width) of each of n rows (stride `from`) into dst (stride `to`).
void copy_cols(const float* src, size_t from, int col0, int width, float* dst, size_t to, int n) {
  for (int t = 0; t < n; ++t) std::memcpy(dst + t * to, src + t * from + col0, width * sizeof(float));
}

}  // namespace

MatView MlaAttention::k_up(const WeightRef& r, int h) {
  const int L = c_.mla.kv_lora_rank, dv = c_.mla.head_dim_v, nope = c_.mla.head_dim_k - c_.rope.n_dims;
  if (w_.kv_b) return row_range(r.mat(), L, (int64_t)h * (nope + dv), nope);
  if (k_up_copy_.empty()) {  // k_b holds each head as [kv_lora rows, n_nope cols]
    k_up_copy_.resize((size_t)c_.n_head * nope * L);
    for (int i = 0; i < c_.n_head; ++i)
      transpose_to_f32(row_range(r.mat(), nope, (int64_t)i * L, L), k_up_copy_.data() + (size_t)i * nope * L);
  }
  return f32_view(k_up_copy_.data() + (size_t)h * nope * L, L, nope);
}

MatView MlaAttention::k_up_t(const WeightRef& r, int h) {
  const int L = c_.mla.kv_lora_rank, dv = c_.mla.head_dim_v, nope = c_.mla.head_dim_k - c_.rope.n_dims;
  if (w_.k_b) return row_range(r.mat(), nope, (int64_t)h * L, L);
  if (k_up_t_copy_.empty()) {  // kv_b holds each head's K half as [n_nope rows, kv_lora cols]
    k_up_t_copy_.resize((size_t)c_.n_head * L * nope);
    for (int i = 0; i < c_.n_head; ++i)
      transpose_to_f32(row_range(r.mat(), L, (int64_t)i * (nope + dv), nope), k_up_t_copy_.data() + (size_t)i * L * nope);
  }
  return f32_view(k_up_t_copy_.data() + (size_t)h * L * nope, nope, L);
}

MatView MlaAttention::v_up(const WeightRef& r, int h) const {
  const int L = c_.mla.kv_lora_rank, dv = c_.mla.head_dim_v, nope = c_.mla.head_dim_k - c_.rope.n_dims;
  if (w_.v_b) return row_range(r.mat(), L, (int64_t)h * dv, dv);
  return row_range(r.mat(), L, (int64_t)h * (nope + dv) + nope, dv);
}

void MlaAttention::project_q(WeightStore& store, ThreadPool& pool, const float* xn, int n) {
  const int H = c_.n_head, dk = c_.mla.head_dim_k;
  grow(q_, (size_t)n * H * dk);
  if (w_.q_a) {
    grow(qa_, (size_t)n * c_.mla.q_lora_rank);
    {
      WeightRef wa = store.acquire(*w_.q_a), norm = store.acquire(*w_.q_a_norm);
      matmul(pool, wa.mat(), xn, n, qa_.data(), mm_);  // [n, q_lora_rank]
      rms_norm(qa_.data(), norm.f32(), qa_.data(), n, c_.mla.q_lora_rank, c_.rms_eps);
    }
    WeightRef wb = store.acquire(*w_.q_b);
    matmul(pool, wb.mat(), qa_.data(), n, q_.data(), mm_);  // [n, n_head * head_dim_k]
  } else {
    WeightRef wq = store.acquire(*w_.q);
    matmul(pool, wq.mat(), xn, n, q_.data(), mm_);  // [n, n_head * head_dim_k]
  }
}

// The cache rows: [latent (normed) | rope key (rotated)] per token.
void MlaAttention::project_kv(WeightStore& store, ThreadPool& pool, const Batch& batch, const float* xn) {
  const int n = batch.size(), L = c_.mla.kv_lora_rank, r = c_.rope.n_dims, row = L + r;
  grow(kva_, (size_t)n * row);
  grow(qh_, (size_t)n * r);
  WeightRef wa = store.acquire(*w_.kv_a), norm = store.acquire(*w_.kv_a_norm);
  matmul(pool, wa.mat(), xn, n, kva_.data(), mm_);  // [n, kv_lora_rank + n_rope]
  for (int t = 0; t < n; ++t) rms_norm(kva_.data() + (size_t)t * row, norm.f32(), kva_.data() + (size_t)t * row, 1, L, c_.rms_eps);
  copy_cols(kva_.data(), row, L, r, qh_.data(), r, n);  // [n, n_rope]
  rope(qh_.data(), n, 1, r, batch.pos.data(), c_.rope, nullptr);
  for (int t = 0; t < n; ++t) std::memcpy(kva_.data() + (size_t)t * row + L, qh_.data() + (size_t)t * r, r * sizeof(float));
}

void MlaAttention::forward(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch,
                           const float* xn, float* out, MlaForm form) {
  const int n = batch.size(), H = c_.n_head, dk = c_.mla.head_dim_k, r = c_.rope.n_dims;
  project_q(store, pool, xn, n);  // q_: [n, n_head, nope | rope]
  // Rotate each head's rope part (its last n_rope values).
  grow(qh_, (size_t)n * H * r);
  copy_cols(q_.data(), dk, dk - r, r, qh_.data(), r, n * H);  // [n * n_head, n_rope]
  rope(qh_.data(), n, H, r, batch.pos.data(), c_.rope, nullptr);
  for (int i = 0; i < n * H; ++i) std::memcpy(q_.data() + (size_t)i * dk + dk - r, qh_.data() + (size_t)i * r, r * sizeof(float));

  project_kv(store, pool, batch, xn);           // kva_: [n, kv_lora_rank + n_rope]
  kv_store(kv, layer, batch, kva_.data(), nullptr);

  grow(att_, (size_t)n * H * c_.mla.head_dim_v);
  if (form == MlaForm::Plain) attend_plain(store, pool, kv, layer, batch);
  else attend_absorbed(store, pool, kv, layer, batch);  // att_: [n, n_head * head_dim_v]
  WeightRef wo = store.acquire(*w_.wo);
  matmul(pool, wo.mat(), att_.data(), n, out, mm_);  // [n, n_embd]
}

// Attention in latent space: q_lat = W_uk^T q_nope per head scores against the
// cached latents directly (and q_pe against the cached rope keys); the softmax-
// weighted sum of latents goes through W_uv once per head.
void MlaAttention::attend_absorbed(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch) {
  const int n = batch.size(), H = c_.n_head, dk = c_.mla.head_dim_k, dv = c_.mla.head_dim_v;
  const int L = c_.mla.kv_lora_rank, r = c_.rope.n_dims, nope = dk - r, row = L + r;
  grow(qlat_, (size_t)n * H * row);  // [n, n_head, kv_lora_rank + n_rope]
  grow(olat_, (size_t)n * H * L);    // [n, n_head, kv_lora_rank]
  grow(qh_, (size_t)n * std::max(nope, L));
  grow(oh_, (size_t)n * std::max(L, dv));
  WeightRef kb = store.acquire(w_.k_b ? *w_.k_b : *w_.kv_b), vb = store.acquire(w_.v_b ? *w_.v_b : *w_.kv_b);
  const float scale = mla_kq_scale(c_);
  for (int h = 0; h < H; ++h) {
    copy_cols(q_.data(), (size_t)H * dk, h * dk, nope, qh_.data(), nope, n);  // [n, n_nope]
    matmul(pool, k_up_t(kb, h), qh_.data(), n, oh_.data(), mm_);             // [n, kv_lora_rank]
    for (int t = 0; t < n; ++t) {
      float* ql = qlat_.data() + ((size_t)t * H + h) * row;
      const float* src = q_.data() + ((size_t)t * H + h) * dk;
      for (int i = 0; i < L; ++i) ql[i] = oh_[(size_t)t * L + i] * scale;
      for (int i = 0; i < r; ++i) ql[L + i] = src[nope + i] * scale;
    }
  }
  std::map<int, KvSeqView> views;
  int max_pos = 0;
  for (int t = 0; t < n; ++t) {
    if (!views.count(batch.seq[t])) views.emplace(batch.seq[t], kv.view(layer, batch.seq[t]));
    max_pos = std::max(max_pos, batch.pos[t]);
  }
  std::vector<std::vector<float>> scores(pool.size(), std::vector<float>(max_pos + 1));
  const RowKernels& rk = kernels().rows;
  pool.run((int64_t)n * H, [&](int64_t task, int thread) {
    const int t = (int)(task / H);
    const KvSeqView& view = views.at(batch.seq[t]);
    const float* ql = qlat_.data() + task * row;
    const int n_pos = batch.pos[t] + 1;
    float* s = scores[thread].data();
    for (int p0 = 0, run; p0 < n_pos; p0 += run) {
      run = std::min(n_pos - p0, view.block_size - p0 % view.block_size);
      rk.dot_rows(row, ql, view.k(p0), view.k_row, run, s + p0);  // latent and rope parts at once
    }
    const float mx = *std::max_element(s, s + n_pos);
    const float inv = 1.0f / rk.exp_sum(s, n_pos, mx);
    float* o = olat_.data() + task * L;
    std::fill(o, o + L, 0.0f);
    for (int p0 = 0, run; p0 < n_pos; p0 += run) {
      run = std::min(n_pos - p0, view.block_size - p0 % view.block_size);
      rk.axpy_rows(L, s + p0, view.k(p0), view.k_row, run, o);  // the latent is the value
    }
    for (int i = 0; i < L; ++i) o[i] *= inv;
  });
  for (int h = 0; h < H; ++h) {
    copy_cols(olat_.data(), (size_t)H * L, h * L, L, qh_.data(), L, n);  // [n, kv_lora_rank]
    matmul(pool, v_up(vb, h), qh_.data(), n, oh_.data(), mm_);          // [n, head_dim_v]
    for (int t = 0; t < n; ++t)
      std::memcpy(att_.data() + ((size_t)t * H + h) * dv, oh_.data() + (size_t)t * dv, dv * sizeof(float));
  }
}

// Decompresses every cached latent a sequence of the batch attends to into
// per-head K (nope part) and V, then ordinary attention with the shared rope key.
void MlaAttention::attend_plain(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch) {
  const int n = batch.size(), H = c_.n_head, dk = c_.mla.head_dim_k, dv = c_.mla.head_dim_v;
  const int L = c_.mla.kv_lora_rank, r = c_.rope.n_dims, nope = dk - r;
  WeightRef kb = store.acquire(w_.k_b ? *w_.k_b : *w_.kv_b), vb = store.acquire(w_.v_b ? *w_.v_b : *w_.kv_b);
  const float scale = mla_kq_scale(c_);
  std::map<int, int> n_pos_of;  // seq -> positions its tokens attend to
  for (int t = 0; t < n; ++t) n_pos_of[batch.seq[t]] = std::max(n_pos_of[batch.seq[t]], batch.pos[t] + 1);
  for (const auto& [seq, P] : n_pos_of) {
    const KvSeqView view = kv.view(layer, seq);
    grow(lat_, (size_t)P * L);
    for (int p = 0; p < P; ++p) std::memcpy(lat_.data() + (size_t)p * L, view.k(p), L * sizeof(float));  // [P, kv_lora_rank]
    grow(kn_, (size_t)H * P * nope);  // [n_head, P, n_nope]
    grow(vv_, (size_t)H * P * dv);    // [n_head, P, head_dim_v]
    for (int h = 0; h < H; ++h) {
      matmul(pool, k_up(kb, h), lat_.data(), P, kn_.data() + (size_t)h * P * nope, mm_);
      matmul(pool, v_up(vb, h), lat_.data(), P, vv_.data() + (size_t)h * P * dv, mm_);
    }
    std::vector<std::vector<float>> scores(pool.size(), std::vector<float>(P));
    pool.run((int64_t)n * H, [&](int64_t task, int thread) {
      const int t = (int)(task / H), h = (int)(task % H);
      if (batch.seq[t] != seq) return;
      const float* q = q_.data() + task * dk;  // [n_nope | n_rope]
      const int n_pos = batch.pos[t] + 1;
      float* s = scores[thread].data();
      for (int p = 0; p < n_pos; ++p) {
        const float* k = kn_.data() + ((size_t)h * P + p) * nope;
        const float* k_pe = view.k(p) + L;
        float dot = 0;
        for (int i = 0; i < nope; ++i) dot += q[i] * k[i];
        for (int i = 0; i < r; ++i) dot += q[nope + i] * k_pe[i];
        s[p] = dot * scale;
      }
      const float mx = *std::max_element(s, s + n_pos);
      float sum = 0;
      for (int p = 0; p < n_pos; ++p) sum += s[p] = std::exp(s[p] - mx);
      float* o = att_.data() + task * dv;
      std::fill(o, o + dv, 0.0f);
      for (int p = 0; p < n_pos; ++p) {
        const float* v = vv_.data() + ((size_t)h * P + p) * dv;
        for (int i = 0; i < dv; ++i) o[i] += s[p] * v[i];
      }
      for (int i = 0; i < dv; ++i) o[i] /= sum;
    });
  }
}

}  // namespace spool
