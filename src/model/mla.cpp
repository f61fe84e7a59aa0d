// Multi-head latent attention: projections, the latent cache row, and the
// plain and absorbed attention forms (see mla.h).
#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
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
  grow(s_->q, (size_t)n * H * dk);
  if (w_.q_a) {
    grow(s_->qa, (size_t)n * c_.mla.q_lora_rank);
    {
      WeightRef wa = store.acquire(*w_.q_a), norm = store.acquire(*w_.q_a_norm);
      matmul(pool, wa.mat(), xn, n, s_->qa.data(), s_->mm);  // [n, q_lora_rank]
      rms_norm(s_->qa.data(), norm.f32(), s_->qa.data(), n, c_.mla.q_lora_rank, c_.rms_eps);
    }
    WeightRef wb = store.acquire(*w_.q_b);
    matmul(pool, wb.mat(), s_->qa.data(), n, s_->q.data(), s_->mm);  // [n, n_head * head_dim_k]
  } else {
    WeightRef wq = store.acquire(*w_.q);
    matmul(pool, wq.mat(), xn, n, s_->q.data(), s_->mm);  // [n, n_head * head_dim_k]
  }
}

// The cache rows: [latent (normed) | rope key (rotated)] per token.
void MlaAttention::project_kv(WeightStore& store, ThreadPool& pool, const Batch& batch, const float* xn) {
  const int n = batch.size(), L = c_.mla.kv_lora_rank, r = c_.rope.n_dims, row = L + r;
  grow(s_->kva, (size_t)n * row);
  grow(s_->qh, (size_t)n * r);
  WeightRef wa = store.acquire(*w_.kv_a), norm = store.acquire(*w_.kv_a_norm);
  matmul(pool, wa.mat(), xn, n, s_->kva.data(), s_->mm);  // [n, kv_lora_rank + n_rope]
  for (int t = 0; t < n; ++t) rms_norm(s_->kva.data() + (size_t)t * row, norm.f32(), s_->kva.data() + (size_t)t * row, 1, L, c_.rms_eps);
  if (c_.mla.nope) return;  // Kimi: the rope key is used as it is
  copy_cols(s_->kva.data(), row, L, r, s_->qh.data(), r, n);  // [n, n_rope]
  rope(s_->qh.data(), n, 1, r, batch.pos.data(), c_.rope, nullptr);
  for (int t = 0; t < n; ++t) std::memcpy(s_->kva.data() + (size_t)t * row + L, s_->qh.data() + (size_t)t * r, r * sizeof(float));
}

void MlaAttention::forward(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch,
                           const float* xn, float* out, MlaForm form) {
  const int n = batch.size(), H = c_.n_head, dk = c_.mla.head_dim_k, r = c_.rope.n_dims;
  project_q(store, pool, xn, n);  // q_: [n, n_head, nope | rope]
  // Rotate each head's rope part (its last n_rope values).
  if (!c_.mla.nope) {
    grow(s_->qh, (size_t)n * H * r);
    copy_cols(s_->q.data(), dk, dk - r, r, s_->qh.data(), r, n * H);  // [n * n_head, n_rope]
    rope(s_->qh.data(), n, H, r, batch.pos.data(), c_.rope, nullptr);
    for (int i = 0; i < n * H; ++i) std::memcpy(s_->q.data() + (size_t)i * dk + dk - r, s_->qh.data() + (size_t)i * r, r * sizeof(float));
  }

  project_kv(store, pool, batch, xn);           // kva_: [n, kv_lora_rank + n_rope]
  kv_store(kv, layer, batch, s_->kva.data(), nullptr);

  grow(s_->att, (size_t)n * H * c_.mla.head_dim_v);
  if (form == MlaForm::Plain) attend_plain(store, pool, kv, layer, batch);
  else attend_absorbed(store, pool, kv, layer, batch);  // att_: [n, n_head * head_dim_v]
  if (w_.gate) {  // K3: att *= sigmoid(attn_gate xn)
    const size_t n_att = (size_t)n * H * c_.mla.head_dim_v;
    grow(s_->gate, n_att);
    WeightRef g = store.acquire(*w_.gate);
    matmul(pool, g.mat(), xn, n, s_->gate.data(), s_->mm);  // [n, n_head * head_dim_v]
    for (size_t i = 0; i < n_att; ++i) s_->att[i] *= 1.0f / (1.0f + std::exp(-s_->gate[i]));
  }
  WeightRef wo = store.acquire(*w_.wo);
  matmul(pool, wo.mat(), s_->att.data(), n, out, s_->mm);  // [n, n_embd]
}

// Attention in latent space: q_lat = W_uk^T q_nope per head scores against the
// cached latents directly (and q_pe against the cached rope keys); the softmax-
// weighted sum of latents goes through W_uv once per head. Tokens go through
// in chunks of kMlaTokenChunk (the latent queries are the widest buffers);
// each token's arithmetic is the same whatever its chunk, since a matmul row
// does not depend on the other rows of its batch as long as the batch has two
// or more (so no chunk is a lone row unless the whole batch is).
void MlaAttention::attend_absorbed(WeightStore& store, ThreadPool& pool, KvCache& kv, int layer, const Batch& batch) {
  const int n = batch.size(), H = c_.n_head, dk = c_.mla.head_dim_k, dv = c_.mla.head_dim_v;
  const int L = c_.mla.kv_lora_rank, r = c_.rope.n_dims, nope = dk - r, row = L + r;
  const int chunk = std::min(n, kMlaTokenChunk);
  grow(s_->qlat, (size_t)chunk * H * row);  // [chunk, n_head, kv_lora_rank + n_rope]
  grow(s_->olat, (size_t)chunk * H * L);    // [chunk, n_head, kv_lora_rank]
  grow(s_->qh, (size_t)chunk * std::max(nope, L));
  grow(s_->oh, (size_t)chunk * std::max(L, dv));
  WeightRef kb = store.acquire(w_.k_b ? *w_.k_b : *w_.kv_b), vb = store.acquire(w_.v_b ? *w_.v_b : *w_.kv_b);
  const float scale = mla_kq_scale(c_);
  std::map<int, KvSeqView> views;
  int max_pos = 0;
  for (int t = 0; t < n; ++t) {
    if (!views.count(batch.seq[t])) views.emplace(batch.seq[t], kv.view(layer, batch.seq[t]));
    max_pos = std::max(max_pos, batch.pos[t]);
  }
  std::vector<std::vector<float>> scores(pool.size(), std::vector<float>(max_pos + 1));
  const RowKernels& rk = kernels().rows;
  for (int t0 = 0, nc; t0 < n; t0 += nc) {
    nc = std::min(chunk, n - t0);
    if (n - t0 - nc == 1) --nc;  // leave two rows for the last chunk, never one
    const float* q = s_->q.data() + (size_t)t0 * H * dk;  // this chunk's [nc, n_head, nope | rope]
    for (int h = 0; h < H; ++h) {
      copy_cols(q, (size_t)H * dk, h * dk, nope, s_->qh.data(), nope, nc);    // [nc, n_nope]
      matmul(pool, k_up_t(kb, h), s_->qh.data(), nc, s_->oh.data(), s_->mm);  // [nc, kv_lora_rank]
      for (int t = 0; t < nc; ++t) {
        float* ql = s_->qlat.data() + ((size_t)t * H + h) * row;
        const float* src = q + ((size_t)t * H + h) * dk;
        for (int i = 0; i < L; ++i) ql[i] = s_->oh[(size_t)t * L + i] * scale;
        for (int i = 0; i < r; ++i) ql[L + i] = src[nope + i] * scale;
      }
    }
    pool.run((int64_t)nc * H, [&](int64_t task, int thread) {
      const int t = t0 + (int)(task / H);
      const KvSeqView& view = views.at(batch.seq[t]);
      const float* ql = s_->qlat.data() + task * row;
      const int n_pos = batch.pos[t] + 1;
      float* s = scores[thread].data();
      for (int p0 = 0, run; p0 < n_pos; p0 += run) {
        run = std::min(n_pos - p0, view.block_size - p0 % view.block_size);
        rk.dot_rows(row, ql, view.k(p0), view.k_row, run, s + p0);  // latent and rope parts at once
      }
      const float mx = *std::max_element(s, s + n_pos);
      const float inv = 1.0f / rk.exp_sum(s, n_pos, mx);
      float* o = s_->olat.data() + task * L;
      std::fill(o, o + L, 0.0f);
      for (int p0 = 0, run; p0 < n_pos; p0 += run) {
        run = std::min(n_pos - p0, view.block_size - p0 % view.block_size);
        rk.axpy_rows(L, s + p0, view.k(p0), view.k_row, run, o);  // the latent is the value
      }
      for (int i = 0; i < L; ++i) o[i] *= inv;
    });
    float* att = s_->att.data() + (size_t)t0 * H * dv;
    for (int h = 0; h < H; ++h) {
      copy_cols(s_->olat.data(), (size_t)H * L, h * L, L, s_->qh.data(), L, nc);  // [nc, kv_lora_rank]
      matmul(pool, v_up(vb, h), s_->qh.data(), nc, s_->oh.data(), s_->mm);       // [nc, head_dim_v]
      for (int t = 0; t < nc; ++t)
        std::memcpy(att + ((size_t)t * H + h) * dv, s_->oh.data() + (size_t)t * dv, dv * sizeof(float));
    }
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
  for (const auto& entry : n_pos_of) {
    // Plain names, not a structured binding: the lambda below captures them (clang < 16 cannot).
    const int seq = entry.first, P = entry.second;
    const KvSeqView view = kv.view(layer, seq);
    grow(s_->lat, (size_t)P * L);
    for (int p = 0; p < P; ++p) std::memcpy(s_->lat.data() + (size_t)p * L, view.k(p), L * sizeof(float));  // [P, kv_lora_rank]
    grow(s_->kn, (size_t)H * P * nope);  // [n_head, P, n_nope]
    grow(s_->vv, (size_t)H * P * dv);    // [n_head, P, head_dim_v]
    for (int h = 0; h < H; ++h) {
      matmul(pool, k_up(kb, h), s_->lat.data(), P, s_->kn.data() + (size_t)h * P * nope, s_->mm);
      matmul(pool, v_up(vb, h), s_->lat.data(), P, s_->vv.data() + (size_t)h * P * dv, s_->mm);
    }
    std::vector<std::vector<float>> scores(pool.size(), std::vector<float>(P));
    pool.run((int64_t)n * H, [&](int64_t task, int thread) {
      const int t = (int)(task / H), h = (int)(task % H);
      if (batch.seq[t] != seq) return;
      const float* q = s_->q.data() + task * dk;  // [n_nope | n_rope]
      const int n_pos = batch.pos[t] + 1;
      float* s = scores[thread].data();
      for (int p = 0; p < n_pos; ++p) {
        const float* k = s_->kn.data() + ((size_t)h * P + p) * nope;
        const float* k_pe = view.k(p) + L;
        float dot = 0;
        for (int i = 0; i < nope; ++i) dot += q[i] * k[i];
        for (int i = 0; i < r; ++i) dot += q[nope + i] * k_pe[i];
        s[p] = dot * scale;
      }
      const float mx = *std::max_element(s, s + n_pos);
      float sum = 0;
      for (int p = 0; p < n_pos; ++p) sum += s[p] = std::exp(s[p] - mx);
      float* o = s_->att.data() + task * dv;
      std::fill(o, o + dv, 0.0f);
      for (int p = 0; p < n_pos; ++p) {
        const float* v = s_->vv.data() + ((size_t)h * P + p) * dv;
        for (int i = 0; i < dv; ++i) o[i] += s[p] * v[i];
      }
      for (int i = 0; i < dv; ++i) o[i] /= sum;
    });
  }
}

}  // namespace spool
