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

  void add(int32_t token, int32_t position, int32_t seq_id, bool logits) {
    tokens.push_back(token);
    pos.push_back(position);
    seq.push_back(seq_id);
    want_logits.push_back(logits ? 1 : 0);
  }
  void clear() { tokens.clear(); pos.clear(); seq.clear(); want_logits.clear(); }
  int32_t size() const { return (int32_t)tokens.size(); }
  int32_t n_outputs() const {
    int32_t n = 0;
    for (uint8_t w : want_logits) n += w;
    return n;
  }
};

}  // namespace spool
