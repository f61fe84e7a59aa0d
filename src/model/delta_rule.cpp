// Scalar reference of the gated delta rule and the short causal convolution.
#include "model/delta_rule.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace spool {

void delta_rule_step(float* S, int dk, int dv, const float* q, const float* k, const float* v, const float* decay,
                     float beta, float scale, float* o) {
  std::vector<float> kS(dv, 0.0f);
  for (int i = 0; i < dk; ++i) {
    float* row = S + (size_t)i * dv;
    const float d = decay[i], ki = k[i];
    for (int j = 0; j < dv; ++j) {
      row[j] *= d;
      kS[j] += ki * row[j];
    }
  }
  for (int j = 0; j < dv; ++j) kS[j] = beta * (v[j] - kS[j]);  // u
  for (int j = 0; j < dv; ++j) o[j] = 0.0f;
  for (int i = 0; i < dk; ++i) {
    float* row = S + (size_t)i * dv;
    const float ki = k[i], qi = q[i];
    for (int j = 0; j < dv; ++j) {
      row[j] += ki * kS[j];
      o[j] += qi * row[j];
    }
  }
  for (int j = 0; j < dv; ++j) o[j] *= scale;
}

void causal_conv1d(const float* x, int n, int C, const float* w, int K, float* state, float* out) {
  const int H = K - 1;  // history rows
  for (int t = 0; t < n; ++t) {
    const float* xt = x + (size_t)t * C;
    float* ot = out + (size_t)t * C;
    for (int c = 0; c < C; ++c) {
      const float* wc = w + (size_t)c * K;
      float acc = wc[H] * xt[c];
      for (int j = 0; j < H; ++j) acc += wc[j] * state[(size_t)j * C + c];
      ot[c] = acc;
    }
    if (H > 0) {  // shift the history by one token
      std::memmove(state, state + C, (size_t)(H - 1) * C * sizeof(float));
      std::memcpy(state + (size_t)(H - 1) * C, xt, (size_t)C * sizeof(float));
    }
  }
}

void l2_normalize(float* x, int n, float eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += (double)x[i] * x[i];
  const float inv = (float)(1.0 / std::sqrt(ss + eps));
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace spool
