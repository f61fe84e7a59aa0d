// A single-sequence inference session over a model: feeds prompt tokens in
// batches (chunked prefill), then one token per decode step, keeping the KV
// cache. Used by the CLI's run, perplexity and bench commands.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/kv_disk.h"

namespace spool {

class PagedKvCache;

class Session {
 public:
  // n_ctx: maximum positions; n_batch: tokens per forward pass during prefill.
  Session(Model& model, int n_ctx, int n_batch = 512);

  // Appends tokens at the next positions. If all_logits, returns logits for
  // every token ([n, n_vocab]); otherwise only for the last ([1, n_vocab]).
  // stepwise: a hybrid model folds these tokens into its recurrent state one at
  // a time, as single-token feeds do (Batch::stepwise_seqs), not in the delta
  // rule's chunked form.
  const std::vector<float>& feed(const std::vector<int32_t>& tokens, bool all_logits = false, bool stepwise = false);
  int n_past() const { return n_past_; }
  // Forgets positions [n_past, n_past()) (drafted tokens that were rejected);
  // their K/V is overwritten by the next feed(). Not for models with a
  // recurrent state, which cannot go back (throws spool::Error).
  void rewind(int n_past);
  bool can_rewind() const { return kv_->recurrent() == nullptr; }
  // Models with a recurrent state go back only to a checkpoint: checkpoint()
  // saves the state and position, restore_checkpoint() returns to them.
  bool recurrent() const { return kv_->recurrent() != nullptr; }
  void checkpoint();
  void restore_checkpoint();
  int n_ctx() const { return n_ctx_; }
  void reset();

  // KV disk tier (runtime/kv_disk.h), set on a fresh session (the KV cache
  // becomes the engine's paged one): every full block of this session's
  // tokens is saved there, and the first feed() of a fresh session (without
  // all_logits) loads the longest run of its leading blocks found there
  // instead of computing them (all but the last token's block), the same
  // files and keys the engine uses. Not for models with a recurrent state
  // (returns false). The tier must outlive the session.
  bool set_kv_disk(KvDiskTier* disk);
  int disk_hit_tokens() const { return disk_hit_tokens_; }

 private:
  int load_from_disk(const std::vector<int32_t>& tokens);  // positions loaded (whole blocks)
  void save_to_disk();                                      // blocks completed since the last call

  Model& model_;
  int n_ctx_, n_batch_;
  std::unique_ptr<KvCache> kv_;
  int n_past_ = 0;
  KvDiskTier* disk_ = nullptr;
  PagedKvCache* paged_ = nullptr;  // kv_, with a disk tier
  std::vector<int32_t> history_;  // tokens at positions [0, n_past_) (with a disk tier)
  std::vector<uint64_t> keys_;    // block keys of history_'s saved blocks
  int disk_hit_tokens_ = 0;
  std::vector<float> logits_;
  std::vector<float> chunk_logits_;
  std::vector<float> saved_state_;  // checkpoint(): the recurrent state
  int saved_past_ = -1;
};

}  // namespace spool
