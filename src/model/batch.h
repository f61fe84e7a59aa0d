// A batch for one forward pass: tokens from one or more sequences at given
// positions (prefill chunks and single decode tokens mixed). Rows with
// want_logits set produce a row of logits, in batch order.
#pragma once

#include <cstdint>
#include <vector>

namespace spool {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;
  std::vector<uint8_t> want_logits;
  // Hybrid models: sequences whose rows fold into the recurrent state one
  // token at a time (as decode steps do) instead of in the delta rule's
  // chunked form, whose rounding differs: a speculative verify pass, and the
  // recomputation after one, must give the numbers of one-token steps.
  std::vector<int32_t> stepwise_seqs;

  void add(int32_t token, int32_t position, int32_t seq_id, bool logits) {
    tokens.push_back(token);
    pos.push_back(position);
    seq.push_back(seq_id);
    want_logits.push_back(logits ? 1 : 0);
  }
  void clear() { tokens.clear(); pos.clear(); seq.clear(); want_logits.clear(); stepwise_seqs.clear(); }
  bool stepwise(int32_t s) const {
    for (int32_t x : stepwise_seqs)
      if (x == s) return true;
    return false;
  }
  int32_t size() const { return (int32_t)tokens.size(); }
  int32_t n_outputs() const {
    int32_t n = 0;
    for (uint8_t w : want_logits) n += w;
    return n;
  }
};

}  // namespace spool
