// Token sampling: penalties (repetition, frequency, presence) over recent
// tokens, then the request's logit bias (OpenAI's `logit_bias`), then top-k,
// top-p, min-p and temperature, then a seeded draw; with temperature 0 it is
// greedy (argmax after penalties and bias). Otherwise the order of llama.cpp's
// default sampler chain. A grammar's token mask, when given, removes the tokens
// it forbids before top-k/top-p/min-p (as llama.cpp applies its grammar first),
// as does a bias of -100 or less, so those filters see only allowed tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <utility>
#include <vector>

namespace spool {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int penalty_last_n = 64;
  uint64_t seed = 0xFFFFFFFFFFFFFFFFull;  // this value: random seed
  // (token id, bias) added to the token's logit, as OpenAI's logit_bias: also
  // for greedy; a bias <= kBanBias bans the token. Ids outside the vocabulary
  // are ignored here (the server and the engine refuse them first).
  std::vector<std::pair<int32_t, float>> logit_bias;
};
constexpr float kBanBias = -100.0f;

class Sampler {
 public:
  Sampler(const SamplingParams& params, int n_vocab);
  // Picks the next token from a row of n_vocab logits. `allowed` (bit i:
  // token i may be picked) restricts the choice; -1 if it allows nothing.
  int32_t sample(const float* logits, const uint32_t* allowed = nullptr);
  // Records a token (prompt or generated) for the penalties.
  void accept(int32_t token);
  void reset();

 private:
  struct Candidate { int32_t id; float logit; float p; };
  void apply_penalties(std::vector<Candidate>& c) const;
  void apply_logit_bias(std::vector<Candidate>& c) const;

  SamplingParams params_;
  int n_vocab_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<Candidate> cand_;
  bool has_bans_ = false;  // some logit_bias entry bans its token
};

}  // namespace spool
