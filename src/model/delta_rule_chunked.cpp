// Chunked gated delta rule (see the header for the algebra).
#include "model/delta_rule_chunked.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"

namespace spool {
namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// One chunk of L tokens starting at row t0.
void chunk_step(float* S, int dk, int dv, int t0, int L, const DeltaRuleRows& r, float scale, DeltaRuleScratch& s) {
  const RowKernels& rk = kernels().rows;
  const int ng = r.n_g;
  // gamma [L][ng]: cumulative log decay from the chunk start.
  float* gamma = s.gamma.data();
  for (int t = 0; t < L; ++t) {
    const float* gt = r.g + (size_t)(t0 + t) * r.g_stride;
    for (int c = 0; c < ng; ++c) gamma[t * ng + c] = gt[c] + (t ? gamma[(t - 1) * ng + c] : 0.0f);
  }
  auto key = [&](int t) { return r.k + (size_t)(t0 + t) * r.k_stride; };
  auto query = [&](int t) { return r.q + (size_t)(t0 + t) * r.q_stride; };
  // kq [2L][dk]: e^{gamma_t} k_t, then e^{gamma_t} q_t; w [2L][dv] = S0^T of each (S0 read once).
  float* kq = s.kd.data();
  for (int t = 0; t < L; ++t) {
    const float* kt = key(t);
    const float* qt = query(t);
    float* kd = kq + (size_t)t * dk;
    float* qd = kq + (size_t)(L + t) * dk;
    if (ng == 1) {
      const float e = std::exp(gamma[t]);
      for (int i = 0; i < dk; ++i) kd[i] = e * kt[i], qd[i] = e * qt[i];
    } else {
      for (int i = 0; i < dk; ++i) {
        const float e = std::exp(gamma[t * ng + i]);
        kd[i] = e * kt[i], qd[i] = e * qt[i];
      }
    }
  }
  float* w = s.w.data();
  std::memset(w, 0, sizeof(float) * 2 * L * dv);
  rk.axpy_rows_multi(dv, kq, dk, 2 * L, S, dv, dk, w);
  // Pair weights: a[t][s] = -A[t][s] (s < t), b[t][s] = B[t][s] (s <= t).
  float* a = s.a.data();
  float* b = s.b.data();
  for (int t = 0; t < L; ++t) {
    const float beta = r.beta[(size_t)(t0 + t) * r.beta_stride];
    const float* kt = key(t);
    const float* qt = query(t);
    float* at = a + (size_t)t * L;
    float* bt = b + (size_t)t * L;
    if (ng == 1) {
      rk.dot_rows(dk, kt, key(0), r.k_stride, t, at);
      rk.dot_rows(dk, qt, key(0), r.k_stride, t + 1, bt);
      for (int j = 0; j <= t; ++j) {
        const float e = std::exp(gamma[t] - gamma[j]);
        if (j < t) at[j] *= -beta * e;
        bt[j] *= e;
      }
    } else {
      for (int j = 0; j <= t; ++j) {
        const float* kj = key(j);
        float sa = 0.0f, sb = 0.0f;
        for (int i = 0; i < dk; ++i) {
          const float e = std::exp(gamma[t * ng + i] - gamma[j * ng + i]) * kj[i];
          sa += kt[i] * e;
          sb += qt[i] * e;
        }
        if (j < t) at[j] = -beta * sa;
        bt[j] = sb;
      }
    }
    // u_t = beta_t (v_t - S0^T kd_t) - sum_{s<t} A[t][s] u_s
    float* ut = s.u.data() + (size_t)t * dv;
    const float* vt = r.v + (size_t)(t0 + t) * r.v_stride;
    const float* wt = w + (size_t)t * dv;
    for (int j = 0; j < dv; ++j) ut[j] = beta * (vt[j] - wt[j]);
    if (t > 0) rk.axpy_rows(dv, at, s.u.data(), dv, t, ut);
    // o_t = scale (S0^T qd_t + sum_{s<=t} B[t][s] u_s)
    float* ot = r.o + (size_t)(t0 + t) * r.o_stride;
    float* oq = w + (size_t)(L + t) * dv;
    rk.axpy_rows(dv, bt, s.u.data(), dv, t + 1, oq);
    for (int j = 0; j < dv; ++j) ot[j] = scale * oq[j];
  }
  // S_L = diag(e^{gamma_L}) S0 + sum_s diag(e^{gamma_L - gamma_s}) k_s u_s^T, row by row.
  const float* gl = gamma + (size_t)(L - 1) * ng;
  float* col = s.col.data();
  for (int i = 0; i < dk; ++i) {
    const float gi = gl[ng == 1 ? 0 : i];
    for (int t = 0; t < L; ++t) col[t] = key(t)[i] * std::exp(gi - gamma[t * ng + (ng == 1 ? 0 : i)]);
    float* row = S + (size_t)i * dv;
    const float e = std::exp(gi);
    for (int j = 0; j < dv; ++j) row[j] *= e;
    rk.axpy_rows(dv, col, s.u.data(), dv, L, row);
  }
}

}  // namespace

void delta_rule_chunked(float* S, int dk, int dv, int n, const DeltaRuleRows& rows, float scale, int chunk,
                        DeltaRuleScratch& s, int pos0) {
  chunk = std::max(1, chunk);
  // The first chunk ends at the next absolute multiple of `chunk`, so the split
  // (and the rounding) does not depend on where a batch starts.
  const int first = std::min(n, chunk - (int)((unsigned)std::max(pos0, 0) % (unsigned)chunk));
  chunk = std::min(chunk, n);
  grow(s.gamma, (size_t)chunk * rows.n_g);
  grow(s.kd, (size_t)2 * chunk * dk);
  grow(s.w, (size_t)2 * chunk * dv);
  grow(s.u, (size_t)chunk * dv);
  grow(s.a, (size_t)chunk * chunk);
  grow(s.b, (size_t)chunk * chunk);
  grow(s.col, (size_t)chunk);
  if (first > 0) chunk_step(S, dk, dv, 0, first, rows, scale, s);
  for (int t0 = first; t0 < n; t0 += chunk) chunk_step(S, dk, dv, t0, std::min(chunk, n - t0), rows, scale, s);
}

}  // namespace spool
