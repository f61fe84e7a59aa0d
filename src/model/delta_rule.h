// Reference operations of the linear-attention layers in hybrid models
// (Gated DeltaNet: Qwen3-Next / Qwen3.5; Kimi Delta Attention: Kimi Linear /
// K3). Scalar, one token at a time: the recurrent form decode uses and that
// any faster (chunked, SIMD) form must agree with.
//
// Gated delta rule for one head, state S [dk][dv] (row i: key channel i):
//   S = diag(decay) S                     decay = exp(g): per key channel (KDA),
//                                         or the same value for all (GDN)
//   u = beta * (v - S^T k)
//   S = S + k u^T
//   o = scale * S^T q
#pragma once

namespace spool {

// One token through one head. q, k [dk], v [dv], decay [dk], o [dv].
void delta_rule_step(float* S, int dk, int dv, const float* q, const float* k, const float* v, const float* decay,
                     float beta, float scale, float* o);

// Depthwise causal 1-D convolution over n tokens of C channels: x and out
// [n][C]; w [C][K] with w[c*K + K-1] the current token's tap; state
// [(K-1)][C] holds the K-1 previous inputs oldest first (zeros at the start of
// a sequence) and is advanced past the n tokens. No bias, no activation.
void causal_conv1d(const float* x, int n, int C, const float* w, int K, float* state, float* out);

// x /= sqrt(sum x^2 + eps) over n values (the L2 normalisation of q and k).
void l2_normalize(float* x, int n, float eps);

}  // namespace spool
