// Prefix index over the paged KV cache: each full block of a sequence is keyed
// by a chained hash (hash of the parent block's key and the block's token ids),
// so a new request finds the longest run of leading full blocks that earlier
// or running requests already computed and shares them by reference count.
// Cached blocks nobody holds stay in the pool's LRU and are evicted (oldest
// released first) when the pool needs blocks; eviction drops their entry.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "runtime/kv_paged.h"

namespace spool {

// A prompt prefix a caller expects to submit again in about steps_until_use
// steps (1 = next). Only its cached full blocks are affected.
struct PrefixHint {
  std::vector<int32_t> tokens;
  int steps_until_use = 1;
};

class PrefixCache {
 public:
  explicit PrefixCache(PagedKvCache& kv);
  ~PrefixCache();

  static constexpr uint64_t kRoot = 0x9E3779B97F4A7C15ull;
  // Key of the block holding tokens [0, n) given its parent's key (kRoot for the first).
  static uint64_t block_key(uint64_t parent, const int32_t* tokens, int n);
  // Keys of every full block of tokens, in order.
  std::vector<uint64_t> keys_of(const std::vector<int32_t>& tokens) const;

  // Leading cached blocks for these tokens (at most max_blocks), in order.
  std::vector<int> match(const std::vector<int32_t>& tokens, int max_blocks) const;
  bool contains(uint64_t key) const { return by_key_.count(key) != 0; }
  // Records that block (full, computed) holds the block_size tokens at
  // block_tokens after the prefix keyed parent. Returns the block's key
  // (whether or not it was new: an existing entry for the prefix is kept).
  uint64_t insert(uint64_t parent, const int32_t* block_tokens, int block);
  int size() const { return (int)by_key_.size(); }
  // Called with a block's key when eviction drops it from the index (state snapshots keyed by it go too).
  std::function<void(uint64_t key)> on_forget;
  // Called when insert() adds an entry (the KV disk tier saves the block).
  std::function<void(uint64_t key, uint64_t parent, const int32_t* tokens, int block)> on_insert;

 private:
  struct Entry { int block; uint64_t parent; std::vector<int32_t> tokens; };
  PagedKvCache& kv_;
  std::unordered_map<uint64_t, Entry> by_key_;
  std::vector<uint64_t> key_of_block_;
};

}  // namespace spool
