// Per-sequence recurrent state of hybrid models' linear-attention layers
// (Gated DeltaNet in Qwen3-Next / Qwen3.5, Kimi Delta Attention in Kimi
// Linear / K3). Unlike the KV cache it does not grow with the context: each
// stateful layer keeps, per sequence, the last (kernel - 1) inputs of its
// short causal convolution and the delta-rule matrix state of every head.
//
// Owned by the KV cache (KvShape::recurrent describes it), so a sequence's
// state is created with its KV (reserve) and freed with it (clear). A state
// has folded in exactly n_tokens(seq) tokens; a model checks that the batch
// continues from there (positions are not rewindable: to recompute, clear).
#pragma once

#include <cstdint>
#include <vector>

#include "core/huge_alloc.h"

namespace spool {

struct RecurrentShape {
  // Per model layer (size n_layer, or empty for a model without state):
  // floats of conv state and of delta-rule state; 0 for layers without.
  std::vector<int64_t> conv_floats;
  std::vector<int64_t> ssm_floats;

  bool empty() const;
  uint64_t bytes_per_seq() const;
};

class RecurrentState {
 public:
  RecurrentState(const RecurrentShape& shape, int max_seqs);

  const RecurrentShape& shape() const { return shape_; }
  int max_seqs() const { return (int)seqs_.size(); }

  // Allocates seq's state (zeroed, n_tokens 0) if it has none. Throws on a bad id.
  void ensure(int seq);
  bool has(int seq) const;
  // Frees seq's state.
  void clear(int seq);
  // seq's state of one layer ([conv_floats] time-major oldest first, and
  // [ssm_floats] as the layer lays it out). ensure() first.
  float* conv(int layer, int seq);
  float* ssm(int layer, int seq);
  // Tokens folded into seq's state so far.
  int n_tokens(int seq) const;
  void set_n_tokens(int seq, int n);
  // dst's state becomes a copy of src's (both allocated as needed).
  void copy(int dst, int src);
  // seq's whole state into `out` (resized); returns its token count. restore()
  // puts such a copy back (a speculative pass's rejected tokens undone).
  int save(int seq, std::vector<float>& out) const;
  void restore(int seq, const std::vector<float>& in, int n_tokens);

  uint64_t bytes_allocated() const;  // states currently held
  int n_active() const;

 private:
  struct Seq {
    HugeArray<float> data;
    int n_tokens = 0;
  };
  RecurrentShape shape_;
  std::vector<uint64_t> conv_off_, ssm_off_;  // per layer, into Seq::data
  uint64_t floats_per_seq_ = 0;
  std::vector<Seq> seqs_;
  Seq& seq_at(int seq);
  const Seq& seq_at(int seq) const;
};

}  // namespace spool
