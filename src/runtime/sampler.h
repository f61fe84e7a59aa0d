// Token sampling: penalties (repetition, frequency, presence) over recent
// tokens, then top-k, top-p, min-p and temperature, then a seeded draw; with
// temperature 0 it is greedy (argmax after penalties). Same order as
// llama.cpp's default sampler chain. A grammar's token mask, when given,
// removes the tokens it forbids before any of that (as llama.cpp applies its
// grammar first), so top-k/top-p/min-p see only allowed tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
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
};

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

  SamplingParams params_;
  int n_vocab_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<Candidate> cand_;
};

}  // namespace spool
