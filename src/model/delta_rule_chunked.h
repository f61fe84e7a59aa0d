// The chunked (parallel) form of the gated delta rule, for prefill, and the
// same code with one-token chunks for decode. Must agree with the scalar
// reference delta_rule_step (model/delta_rule.h); tests/delta_rule_test.cpp.
//
// Within a chunk of L tokens, with gamma_t the cumulative log decay (per key
// channel) from the chunk start and S0 the state before it, the recurrence
// S_t = diag(e^{g_t}) S_{t-1} + k_t u_t^T unrolls to
//   S_t = diag(e^{gamma_t}) S0 + sum_{s<=t} diag(e^{gamma_t - gamma_s}) k_s u_s^T
// so the updates u_t = beta_t (v_t - (diag(e^{g_t}) S_{t-1})^T k_t) solve a
// unit lower-triangular system
//   u_t = beta_t (v_t - S0^T (e^{gamma_t} k_t)) - sum_{s<t} A[t][s] u_s,
//   A[t][s] = beta_t sum_i k_t[i] k_s[i] e^{gamma_t[i] - gamma_s[i]},
// by forward substitution, and
//   o_t = scale (S0^T (e^{gamma_t} q_t) + sum_{s<=t} B[t][s] u_s),  B like A with q_t, no beta,
//   S_L = diag(e^{gamma_L}) S0 + sum_s diag(e^{gamma_L - gamma_s}) k_s u_s^T.
// Every exponent is <= 0 (nothing overflows). The products with S0 read the
// state once per chunk through the row kernels (SIMD), as does the update.
#pragma once

#include <cstddef>
#include <vector>

namespace spool {

struct DeltaRuleScratch {
  std::vector<float> gamma, qd, kd, w, u, a, b, col;
};

// Tokens of one head of one sequence; rows of q/k [dk], v/o [dv] are `*_stride`
// floats apart; g (log decay) is [n][n_g] with n_g 1 (the same decay for every
// key channel: Gated DeltaNet) or dk (per channel: Kimi Delta Attention);
// beta [n]. S [dk][dv] is read and advanced past the n tokens. Processes
// chunks of `chunk` tokens (chunk >= 1; 1 is the recurrent form) aligned to
// absolute positions: pos0 is the first row's position, and chunks end at
// multiples of `chunk`, so a sequence's result is the same whether its rows
// come in one pass or in passes split at such multiples (state snapshots and
// prefill split over steps rely on it).
struct DeltaRuleRows {
  const float* q;
  const float* k;
  const float* v;
  size_t q_stride, k_stride, v_stride;
  const float* g;
  size_t g_stride;
  int n_g;
  const float* beta;
  size_t beta_stride;
  float* o;
  size_t o_stride;
};

void delta_rule_chunked(float* S, int dk, int dv, int n, const DeltaRuleRows& rows, float scale, int chunk,
                        DeltaRuleScratch& scratch, int pos0 = 0);

}  // namespace spool
