// A single-sequence inference session over a model: feeds prompt tokens in
// batches (chunked prefill), then one token per decode step, keeping the KV
// cache. Used by the CLI's run, perplexity and bench commands.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"

namespace spool {

class Session {
 public:
  // n_ctx: maximum positions; n_batch: tokens per forward pass during prefill.
  Session(Model& model, int n_ctx, int n_batch = 512);

  // Appends tokens at the next positions. If all_logits, returns logits for
  // every token ([n, n_vocab]); otherwise only for the last ([1, n_vocab]).
  const std::vector<float>& feed(const std::vector<int32_t>& tokens, bool all_logits = false);
  int n_past() const { return n_past_; }
  int n_ctx() const { return n_ctx_; }
  void reset();

 private:
  Model& model_;
  int n_ctx_, n_batch_;
  std::unique_ptr<KvCache> kv_;
  int n_past_ = 0;
  std::vector<float> logits_;
  std::vector<float> chunk_logits_;
};

}  // namespace spool
