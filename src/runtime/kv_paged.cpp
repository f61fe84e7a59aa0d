// PagedKvCache: block pool, refcounts, LRU of cached blocks, copy-on-write.
#include "runtime/kv_paged.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace spool {

uint64_t PagedKvCache::block_bytes(const KvShape& s, int block_size) {
  return (uint64_t)s.n_layer * block_size * (s.k_row() + s.v_row()) * s.elem_bytes();
}

PagedKvCache::PagedKvCache(const KvShape& shape, int block_size, int n_blocks, int n_ctx, int max_seqs)
    : shape_(shape), block_size_(block_size), n_blocks_(n_blocks), n_ctx_(n_ctx) {
  if (block_size <= 0 || n_blocks <= 0 || n_ctx <= 0 || max_seqs <= 0)
    throw Error("paged KV cache: block size, block count, context and sequence count must be positive (got " +
                std::to_string(block_size) + ", " + std::to_string(n_blocks) + ", " + std::to_string(n_ctx) + ", " +
                std::to_string(max_seqs) + ")");
  k_ = make_huge_array<uint8_t>((size_t)n_blocks * shape.n_layer * k_block_layer_bytes());
  if (shape.v_row() > 0) v_ = make_huge_array<uint8_t>((size_t)n_blocks * shape.n_layer * v_block_layer_bytes());
  ref_.assign(n_blocks, 0);
  cached_.assign(n_blocks, 0);
  hint_.assign(n_blocks, 0);
  in_lru_.assign(n_blocks, 0);
  lru_pos_.resize(n_blocks);
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // hands out 0, 1, 2, ... first
  tables_.resize(max_seqs);
  init_recurrent(shape, max_seqs);
}

uint64_t PagedKvCache::bytes_allocated() const {
  return block_bytes(shape_, block_size_) * n_blocks_ + (recurrent_ ? recurrent_->bytes_allocated() : 0);
}

void PagedKvCache::check_seq(int seq) const {
  if (seq < 0 || seq >= (int)tables_.size())
    throw Error("sequence id " + std::to_string(seq) + " out of range (max " + std::to_string(tables_.size()) + ")");
}

int PagedKvCache::alloc() {
  int b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    // The oldest unhinted cached block; when all are hinted, the farthest next use (oldest among equals).
    auto victim = lru_.begin();
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (hint_[*it] == 0) {
        victim = it;
        break;
      }
      if (hint_[*it] > hint_[*victim]) victim = it;
    }
    b = *victim;
    lru_.erase(victim);
    in_lru_[b] = 0;
    hint_[b] = 0;
    if (on_evict) on_evict(b);
    cached_[b] = 0;
  } else {
    return -1;
  }
  SPOOL_CHECK(ref_[b] == 0);
  ref_[b] = 1;
  return b;
}

void PagedKvCache::ref(int block) {
  SPOOL_CHECK(block >= 0 && block < n_blocks_);
  if (ref_[block] == 0) {
    SPOOL_CHECK(in_lru_[block]);  // only a cached block can be revived
    lru_.erase(lru_pos_[block]);
    in_lru_[block] = 0;
  }
  ++ref_[block];
}

void PagedKvCache::unref(int block) {
  SPOOL_CHECK(block >= 0 && block < n_blocks_ && ref_[block] > 0);
  if (--ref_[block] > 0) return;
  if (cached_[block]) {
    lru_.push_back(block);
    lru_pos_[block] = std::prev(lru_.end());
    in_lru_[block] = 1;
  } else {
    free_.push_back(block);
  }
}

int PagedKvCache::n_cached_unhinted() const {
  int n = 0;
  for (int b : lru_) n += hint_[b] == 0;
  return n;
}

void PagedKvCache::set_hint(int block, int steps_until_use) {
  SPOOL_CHECK(block >= 0 && block < n_blocks_ && steps_until_use >= 0);
  hint_[block] = steps_until_use;
}

void PagedKvCache::set_cached(int block, bool cached) {
  SPOOL_CHECK(block >= 0 && block < n_blocks_);
  if (cached_[block] == (uint8_t)cached) return;
  cached_[block] = cached;
  if (!cached && in_lru_[block]) {  // unreferenced and no longer wanted: free it
    lru_.erase(lru_pos_[block]);
    in_lru_[block] = 0;
    free_.push_back(block);
  }
}

void PagedKvCache::append_shared(int seq, int block) {
  check_seq(seq);
  ref(block);
  tables_[seq].push_back(block);
}

int PagedKvCache::blocks_needed(int seq, int begin, int end) const {
  check_seq(seq);
  const std::vector<int>& t = tables_[seq];
  const int have = (int)t.size();
  const int want = (end + block_size_ - 1) / block_size_;
  int n = std::max(0, want - have);
  for (int i = begin / block_size_; i < std::min(have, want); ++i)
    if (shared(t[i])) ++n;  // copy-on-write
  return n;
}

bool PagedKvCache::prepare_write(int seq, int begin, int end) {
  check_seq(seq);
  if (end > n_ctx_)
    throw Error("context full: " + std::to_string(end) + " positions needed, context size is " +
                std::to_string(n_ctx_));
  if (blocks_needed(seq, begin, end) > n_available()) return false;
  std::vector<int>& t = tables_[seq];
  const int want = (end + block_size_ - 1) / block_size_;
  for (int i = begin / block_size_; i < std::min((int)t.size(), want); ++i) {
    if (!shared(t[i])) continue;
    const int copy = alloc();
    SPOOL_CHECK(copy >= 0);
    for (int l = 0; l < shape_.n_layer; ++l) {
      std::memcpy(k_base(copy, l), k_base(t[i], l), k_block_layer_bytes());
      if (shape_.v_row() > 0)
        std::memcpy(v_base(copy, l), v_base(t[i], l), v_block_layer_bytes());
    }
    unref(t[i]);
    t[i] = copy;
  }
  while ((int)t.size() < want) {
    const int b = alloc();
    SPOOL_CHECK(b >= 0);
    t.push_back(b);
  }
  if (recurrent_) recurrent_->ensure(seq);
  return true;
}

void PagedKvCache::reserve(int seq, int n_pos) {
  check_seq(seq);
  if (n_pos > n_ctx_)
    throw Error("context full: " + std::to_string(n_pos) + " positions needed, context size is " +
                std::to_string(n_ctx_));
  const int have_pos = (int)tables_[seq].size() * block_size_;
  if (n_pos > have_pos && !prepare_write(seq, have_pos, n_pos))
    throw Error("KV cache pool exhausted: " + std::to_string(n_blocks_) + " blocks of " +
                std::to_string(block_size_) + " positions");
  if (recurrent_) recurrent_->ensure(seq);
}

KvSeqView PagedKvCache::view(int layer, int seq) {
  check_seq(seq);
  KvSeqView v;
  v.block_size = block_size_;
  v.k_row = shape_.k_row();
  v.v_row = shape_.v_row();
  v.elem_bytes = shape_.elem_bytes();
  const std::vector<int>& t = tables_[seq];
  v.k_blocks.reserve(t.size());
  for (int b : t) v.k_blocks.push_back(k_base(b, layer));
  if (shape_.v_row() > 0) {
    v.v_blocks.reserve(t.size());
    for (int b : t) v.v_blocks.push_back(v_base(b, layer));
  }
  return v;
}

void PagedKvCache::clear(int seq) {
  check_seq(seq);
  // Last block first: a released sequence's tail is evicted before its head,
  // which more prompts share (and without which the rest of the chain is
  // unreachable by prefix lookup).
  for (auto it = tables_[seq].rbegin(); it != tables_[seq].rend(); ++it) unref(*it);
  tables_[seq].clear();
  if (recurrent_) recurrent_->clear(seq);
}

}  // namespace spool
