// Session: chunked prefill and decode for one sequence (seq id 0).
#include "runtime/session.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "runtime/kv_paged.h"
#include "runtime/prefix_cache.h"

namespace spool {

Session::Session(Model& model, int n_ctx, int n_batch)
    : model_(model), n_ctx_(n_ctx), n_batch_(std::max(1, n_batch)) {
  kv_ = make_simple_kv_cache(model.kv_shape(), n_ctx, 1);
}

void Session::reset() {
  kv_->clear(0);
  n_past_ = 0;
  history_.clear();
  keys_.clear();
  saved_past_ = -1;
}

void Session::rewind(int n_past) {
  if (n_past < 0 || n_past > n_past_) throw Error("rewind: position " + std::to_string(n_past) + " is not in [0, " +
                                                  std::to_string(n_past_) + "]");
  if (!can_rewind()) throw Error("rewind: a model with a recurrent state cannot go back");
  n_past_ = n_past;
  if (disk_) {  // saved blocks stay valid (their keys are their own tokens); later ones are saved anew
    history_.resize(n_past_);
    keys_.resize(std::min(keys_.size(), (size_t)(n_past_ / disk_->options().block_size)));
  }
}

void Session::checkpoint() {
  saved_past_ = n_past_;
  if (RecurrentState* rs = kv_->recurrent()) {
    rs->ensure(0);
    rs->save(0, saved_state_);
  }
}

void Session::restore_checkpoint() {
  if (saved_past_ < 0 || saved_past_ > n_past_) throw Error("restore_checkpoint: no checkpoint at or before this position");
  if (RecurrentState* rs = kv_->recurrent()) rs->restore(0, saved_state_, saved_past_);
  n_past_ = saved_past_;
  if (disk_) {
    history_.resize(n_past_);
    keys_.resize(std::min(keys_.size(), (size_t)(n_past_ / disk_->options().block_size)));
  }
}

bool Session::set_kv_disk(KvDiskTier* disk) {
  if (kv_->recurrent()) return false;
  SPOOL_CHECK(n_past_ == 0);
  disk_ = disk;
  // The engine's paged layout, so that blocks are the engine's (one file per
  // block, shared with `spool serve`) and the numbers do not depend on where
  // the prompt was split between disk and computation.
  const int bs = disk_->options().block_size;
  auto paged = std::make_unique<PagedKvCache>(model_.kv_shape(), bs, (n_ctx_ + bs - 1) / bs, n_ctx_, 1);
  paged_ = paged.get();
  kv_ = std::move(paged);
  return true;
}

int Session::load_from_disk(const std::vector<int32_t>& tokens) {
  const int bs = disk_->options().block_size;
  const int n_blocks = ((int)tokens.size() - 1) / bs;  // the last token is computed for its logits
  std::vector<uint64_t> keys;
  uint64_t parent = PrefixCache::kRoot;
  for (int b = 0; b < n_blocks; ++b) {
    parent = PrefixCache::block_key(parent, tokens.data() + (size_t)b * bs, bs);
    keys.push_back(parent);
  }
  constexpr int kAhead = 64;  // blocks read ahead, as the scheduler does
  disk_->will_load({keys.data(), (size_t)std::min(kAhead, n_blocks)});
  int b = 0;
  for (; b < n_blocks; ++b) {
    if (b + kAhead < n_blocks) disk_->will_load({keys.data() + b + kAhead, 1});
    const int blk = paged_->table(0).at(b);
    if (!disk_->load(keys[b], b == 0 ? PrefixCache::kRoot : keys[b - 1], {tokens.data() + (size_t)b * bs, (size_t)bs},
                     paged_->block_k(blk), paged_->block_v(blk)))
      break;
    keys_.push_back(keys[b]);
  }
  return b * bs;
}

void Session::save_to_disk() {
  const int bs = disk_->options().block_size;
  while ((int)(keys_.size() + 1) * bs <= n_past_) {
    const int b = (int)keys_.size();
    const uint64_t parent = b == 0 ? PrefixCache::kRoot : keys_.back();
    const int32_t* t = history_.data() + (size_t)b * bs;
    const uint64_t key = PrefixCache::block_key(parent, t, bs);
    if (!disk_->contains(key)) {
      const int blk = paged_->table(0).at(b);
      disk_->store(key, parent, {t, (size_t)bs}, paged_->block_k(blk), paged_->block_v(blk));
    }
    keys_.push_back(key);
  }
}

const std::vector<float>& Session::feed(const std::vector<int32_t>& tokens, bool all_logits, bool stepwise) {
  const int n_vocab = model_.config().n_vocab;
  if (tokens.empty()) throw Error("nothing to evaluate: empty token list");
  if (n_past_ + (int)tokens.size() > n_ctx_)
    throw Error("context full: " + std::to_string(n_past_ + tokens.size()) + " tokens, context size is " +
                std::to_string(n_ctx_) + " (raise -c)");
  kv_->reserve(0, n_past_ + (int)tokens.size());
  logits_.resize((size_t)(all_logits ? tokens.size() : 1) * n_vocab);
  size_t skip = 0;  // leading tokens whose KV came from the disk tier
  if (disk_) {
    if (n_past_ == 0 && !all_logits) {
      skip = (size_t)load_from_disk(tokens);
      disk_hit_tokens_ += (int)skip;
      n_past_ += (int)skip;
    }
    history_.insert(history_.end(), tokens.begin(), tokens.end());
  }
  Batch batch;
  for (size_t start = skip; start < tokens.size(); start += n_batch_) {
    const size_t end = std::min(tokens.size(), start + n_batch_);
    batch.clear();
    if (stepwise) batch.stepwise_seqs.push_back(0);
    for (size_t i = start; i < end; ++i)
      batch.add(tokens[i], n_past_ + (int)(i - start), 0, all_logits || i + 1 == tokens.size());
    float* out = all_logits ? logits_.data() + start * n_vocab : logits_.data();
    if (!all_logits && end != tokens.size()) {
      chunk_logits_.resize(n_vocab);  // no outputs wanted; pass a dummy
      out = chunk_logits_.data();
    }
    model_.forward(batch, *kv_, out);
    n_past_ += (int)(end - start);
  }
  if (disk_) save_to_disk();
  return logits_;
}

}  // namespace spool
