// A draft model for speculative decoding (`-md FILE`): a smaller model of the
// same vocabulary guesses the next tokens of many sequences at once, and the
// target model verifies them (runtime/speculative.h has the rules).
//
// The draft model keeps its own KV cache, one slot per sequence, and what it
// has computed of each sequence. A step's drafts are made together: one pass
// brings every sequence up to date (the tokens accepted and sampled since its
// last draft; a new sequence's whole prompt, in chunks), then one pass per
// drafted token, each row of it a sequence that still drafts. Draft tokens
// are the draft model's argmax: a draft is a point mass, so the target's
// "sample and keep the draft while it matches" is exactly the accept/reject
// rule and outputs do not change. Positions of rejected draft tokens are
// simply recomputed (overwritten) with the next draft.
//
// Draft models with a recurrent state (linear-attention hybrids) are refused:
// their state cannot drop the rejected positions.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/speculative.h"

namespace spool {

// Throws spool::Error naming what differs when `draft` cannot draft for
// `target`: a vocabulary of another size (beyond padding) or other token
// texts, other BOS/EOS, or a recurrent state.
void check_draft_model(const Model& target, const Model& draft);

struct DraftJob {
  uint64_t key = 0;                              // the sequence (a request id)
  const std::vector<int32_t>* tokens = nullptr;  // the sequence so far; the draft continues it
  int k = 0;                                     // tokens to draft
  std::vector<int32_t> draft;                    // out: at most k tokens (fewer past the context)
};

class DraftModel {
 public:
  // n_ctx: positions per sequence; max_seqs: sequences drafted for at once
  // (more are served by evicting the least recently drafted); n_vocab: the
  // target's vocabulary (the argmax is taken over ids below it only).
  DraftModel(Model& draft, int n_vocab, int n_ctx, int max_seqs);

  // Drafts jobs[i].k tokens for each job, in as few passes as the longest draft.
  void propose(std::vector<DraftJob>& jobs);
  // The sequence is gone: its slot is free again.
  void release(uint64_t key);

  Model& model() { return model_; }
  // Seconds of the draft model's passes by rows (the governor's draft cost).
  const StepCosts& costs() const { return costs_; }
  uint64_t passes() const { return passes_; }
  uint64_t rows() const { return rows_; }  // rows computed, catch-up included
  uint64_t kv_bytes() const { return kv_->bytes_allocated(); }

 private:
  struct Seq {
    int slot = -1;
    std::vector<int32_t> computed;  // tokens whose K/V is in the slot, positions [0, size)
    uint64_t used = 0;              // the step it last drafted (least recent is evicted first)
  };
  Seq& seq_for(uint64_t key);
  void run(const Batch& b);  // one forward pass over the draft model, timed
  int32_t argmax(const float* row) const;

  Model& model_;
  int n_vocab_, n_ctx_, max_seqs_;
  std::unique_ptr<KvCache> kv_;
  std::unordered_map<uint64_t, Seq> seqs_;
  std::vector<int> free_slots_;
  uint64_t step_ = 0;
  Batch batch_;
  std::vector<float> logits_;
  StepCosts costs_;
  uint64_t passes_ = 0, rows_ = 0;
};

}  // namespace spool
