// Sampler implementation. Candidates carry logits until the final softmax so
// that each filter sees the same quantities llama.cpp's chain does.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace spool {

Sampler::Sampler(const SamplingParams& params, int n_vocab) : params_(params), n_vocab_(n_vocab) {
  for (const auto& [id, bias] : params_.logit_bias) has_bans_ |= id >= 0 && id < n_vocab_ && bias <= kBanBias;
  reset();
}

void Sampler::reset() {
  recent_.clear();
  rng_.seed(params_.seed == 0xFFFFFFFFFFFFFFFFull ? std::random_device{}() : params_.seed);
}

void Sampler::accept(int32_t token) {
  if (params_.penalty_last_n <= 0) return;
  recent_.push_back(token);
  while ((int)recent_.size() > params_.penalty_last_n) recent_.pop_front();
}

void Sampler::apply_penalties(std::vector<Candidate>& c) const {
  if (recent_.empty() || (params_.repeat_penalty == 1.0f && params_.frequency_penalty == 0.0f &&
                          params_.presence_penalty == 0.0f))
    return;
  std::unordered_map<int32_t, int> count;
  for (int32_t t : recent_) ++count[t];
  for (const auto& [id, n] : count) {
    if (id < 0 || id >= n_vocab_) continue;
    float& l = c[id].logit;  // candidates are still in id order here
    l = l <= 0 ? l * params_.repeat_penalty : l / params_.repeat_penalty;
    l -= (float)n * params_.frequency_penalty + params_.presence_penalty;
  }
}

// After the penalties, so that a ban stays -inf (a repeat penalty of 0 would
// turn -inf into NaN) and +100 wins whatever the penalties did.
void Sampler::apply_logit_bias(std::vector<Candidate>& c) const {
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || id >= n_vocab_) continue;
    float& l = c[id].logit;  // candidates are still in id order here
    l = bias <= kBanBias ? -INFINITY : l + bias;
  }
}

int32_t Sampler::sample(const float* logits, const uint32_t* allowed) {
  std::vector<Candidate>& c = cand_;
  c.resize(n_vocab_);
  for (int i = 0; i < n_vocab_; ++i) c[i] = {i, logits[i], 0.0f};
  apply_penalties(c);
  apply_logit_bias(c);
  if (allowed || has_bans_) {  // after the penalties and bias, which index candidates by id
    size_t n = 0;
    for (int i = 0; i < n_vocab_; ++i) {
      const bool ok = (!allowed || ((allowed[i >> 5] >> (i & 31)) & 1)) && !(has_bans_ && c[i].logit == -INFINITY);
      if (ok) c[n++] = c[i];
    }
    c.resize(n);
    if (n == 0) return -1;
  }

  if (params_.temperature <= 0.0f) {
    const auto best = std::max_element(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
      return a.logit < b.logit;  // first maximum wins, as an argmax
    });
    return best->id;
  }
  auto by_logit = [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; };
  size_t n = c.size();
  if (params_.top_k > 0 && (size_t)params_.top_k < n) {
    std::partial_sort(c.begin(), c.begin() + params_.top_k, c.end(), by_logit);
    n = (size_t)params_.top_k;
  } else {
    std::sort(c.begin(), c.end(), by_logit);
  }
  c.resize(n);
  // Softmax over the survivors (without temperature, as llama.cpp's top-p/min-p see it).
  auto softmax = [&](float temp) {
    const float mx = c[0].logit;
    double sum = 0;
    for (Candidate& x : c) { x.p = std::exp((x.logit - mx) / temp); sum += x.p; }
    for (Candidate& x : c) x.p = (float)(x.p / sum);
  };
  softmax(1.0f);
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      cum += c[i].p;
      if (cum >= params_.top_p) { keep = i + 1; break; }
    }
    c.resize(keep);
  }
  if (params_.min_p > 0.0f) {
    const float threshold = c[0].p * params_.min_p;
    size_t keep = 1;
    while (keep < c.size() && c[keep].p >= threshold) ++keep;
    c.resize(keep);
  }
  softmax(params_.temperature);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  double r = uni(rng_), cum = 0;
  for (const Candidate& x : c) {
    cum += x.p;
    if (r < cum) return x.id;
  }
  return c.back().id;
}

}  // namespace spool
