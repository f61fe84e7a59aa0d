// The paged KV cache used by the serving engine: one pool of fixed-size
// blocks (block_size positions of every layer's K and V rows), reference
// counted so sequences can share blocks (prefix sharing), with per-sequence
// block tables that attention reads through KvCache::view.
//
// A block is in one of three states: held (refcount > 0), cached (refcount 0
// but marked as holding a reusable prefix: kept in an LRU list and reclaimed,
// oldest first, when the free list runs dry; the eviction callback tells the
// prefix index), or free. Writing into a block another sequence also holds
// copies it first (copy-on-write). MLA shapes (head_dim_v 0) store K only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "core/huge_alloc.h"
#include "model/kv_cache.h"

namespace spool {

class PagedKvCache final : public KvCache {
 public:
  // n_blocks blocks of block_size positions; sequences hold at most n_ctx
  // positions; seq ids are 0..max_seqs-1.
  PagedKvCache(const KvShape& shape, int block_size, int n_blocks, int n_ctx, int max_seqs);

  // Bytes one block takes (K and V rows of every layer).
  static uint64_t block_bytes(const KvShape& shape, int block_size);

  // KvCache. reserve() appends blocks until [0, n_pos) is covered (no
  // copy-on-write: use prepare_write for positions about to be written).
  const KvShape& shape() const override { return shape_; }
  int n_ctx() const override { return n_ctx_; }
  void reserve(int seq, int n_pos) override;
  KvSeqView view(int layer, int seq) override;
  void clear(int seq) override;                 // releases the sequence's blocks
  uint64_t bytes_allocated() const override;    // the whole pool (it is reserved up front)

  // Makes positions [begin, end) of seq writable: appends blocks to cover end
  // and copies any block in the range that is shared (held by another
  // sequence, or indexed by the prefix cache: its contents must not change). Returns false (and
  // changes nothing) if the pool cannot supply the blocks needed.
  bool prepare_write(int seq, int begin, int end);
  // Blocks prepare_write(seq, begin, end) would take from the pool.
  int blocks_needed(int seq, int begin, int end) const;

  // Appends an existing block to seq's table (takes a reference).
  void append_shared(int seq, int block);
  const std::vector<int>& table(int seq) const { return tables_.at(seq); }

  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  int n_free() const { return (int)free_.size(); }
  int n_cached() const { return (int)lru_.size(); }
  int n_cached_unhinted() const;  // cached blocks without a workflow hint
  int n_available() const { return n_free() + n_cached(); }  // obtainable without preempting
  int n_held() const { return n_blocks_ - n_available(); }
  int refcount(int block) const { return ref_[block]; }

  // Cached-block bookkeeping for the prefix index. A cached block whose
  // refcount drops to 0 is kept (most recently released last in the LRU);
  // when reclaimed, on_evict(block) runs first.
  void set_cached(int block, bool cached);
  bool is_cached(int block) const { return cached_[block]; }
  std::function<void(int block)> on_evict;

  // Workflow hints (the agent runtime knows which prefixes later steps reuse):
  // a cached block with a hint is evicted only when no unhinted cached block
  // is left, the one whose next use is farthest first (ties: oldest), instead
  // of plain LRU. 0 clears the hint; the last hint set on a block wins.
  void set_hint(int block, int steps_until_use);
  void clear_hints() { std::fill(hint_.begin(), hint_.end(), 0); }
  int hint(int block) const { return hint_[block]; }

  // One block's bytes as the pool holds them: its K rows of every layer, and
  // its V rows of every layer (empty for MLA). The KV disk tier saves and
  // restores blocks through these.
  std::span<uint8_t> block_k(int block) {
    return {k_base(block, 0), (size_t)shape_.n_layer * k_block_layer_bytes()};
  }
  std::span<uint8_t> block_v(int block) {
    return {v_block_layer_bytes() ? v_base(block, 0) : nullptr, (size_t)shape_.n_layer * v_block_layer_bytes()};
  }

  // Low-level pool operations (tests, prefix cache).
  int alloc();  // a block with refcount 1; -1 when none is free or evictable
  void ref(int block);    // a cached block in the LRU leaves it while held
  void unref(int block);

 private:
  size_t k_block_layer_bytes() const { return (size_t)block_size_ * shape_.k_row() * shape_.elem_bytes(); }
  size_t v_block_layer_bytes() const { return (size_t)block_size_ * shape_.v_row() * shape_.elem_bytes(); }
  uint8_t* k_base(int block, int layer) { return k_.get() + ((size_t)block * shape_.n_layer + layer) * k_block_layer_bytes(); }
  uint8_t* v_base(int block, int layer) { return v_.get() + ((size_t)block * shape_.n_layer + layer) * v_block_layer_bytes(); }
  void check_seq(int seq) const;
  // Written only after a copy: held by another sequence, or indexed as a reusable prefix.
  bool shared(int block) const { return ref_[block] > 1 || cached_[block]; }

  KvShape shape_;
  int block_size_, n_blocks_, n_ctx_;
  HugeArray<uint8_t> k_, v_;  // uninitialised, on huge pages: pages are touched only when used
  std::vector<int> ref_;
  std::vector<uint8_t> cached_;
  std::vector<int> hint_;
  std::vector<int> free_;
  std::list<int> lru_;                              // cached, unreferenced; front = oldest
  std::vector<std::list<int>::iterator> lru_pos_;
  std::vector<uint8_t> in_lru_;
  std::vector<std::vector<int>> tables_;
};

}  // namespace spool
