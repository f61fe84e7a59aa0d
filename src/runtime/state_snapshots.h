// Snapshots of hybrid models' recurrent state (conv + delta-rule state of
// every linear-attention layer) at absolute positions that are multiples of an
// interval, so a request whose prompt starts with a cached prefix restores the
// state there instead of recomputing the prefix: the prefix cache shares the
// attention layers' KV blocks up to that position, the snapshot gives the
// state. Keyed by the prefix cache's chained block hash of the block ending
// at the position (verified against the block's parent key and tokens, as the
// prefix index does). At most max_slots snapshots are held (one full state
// each), least recently used evicted first; the memory budget counts them.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/huge_alloc.h"
#include "model/recurrent_state.h"

namespace spool {

struct StateSnapshotStats {
  int count = 0;           // snapshots held now
  uint64_t bytes = 0;      // their bytes
  uint64_t hits = 0;       // admissions that restored a snapshot
  uint64_t misses = 0;     // admissions long enough for one that found none usable
  uint64_t taken = 0;      // snapshots saved
  uint64_t evicted = 0;    // dropped for room (LRU) or because their KV block left the prefix cache
};

// Floats of one sequence's whole state.
uint64_t state_floats(const RecurrentShape& shape);

class StateSnapshots {
 public:
  // max_slots >= 1; interval > 0 (positions; a multiple of the KV block size).
  StateSnapshots(int max_slots, int interval, uint64_t floats_per_state);

  int interval() const { return interval_; }
  int max_slots() const { return max_slots_; }
  uint64_t bytes_per_snapshot() const { return floats_ * sizeof(float); }

  // Whether a usable snapshot exists for the block keyed `key` whose parent is
  // `parent` and whose tokens are block_tokens[0, n) (n = block size).
  bool has(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n) const;
  // Saves seq's state (which has folded in exactly pos tokens) under key,
  // evicting the least recently used snapshot when full. An existing snapshot
  // for the key is only marked as recently used.
  void save(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n, int pos, const RecurrentState& rs,
            int seq);
  // Restores the snapshot into seq (its state replaced, n_tokens = the
  // snapshot's position) and returns the position, or -1 if there is none.
  int restore(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n, RecurrentState& rs, int seq);
  void drop(uint64_t key);  // e.g. its KV block was evicted: the snapshot cannot be used any more
  // The KV disk tier's side (runtime/kv_disk.h): a snapshot's floats (empty if
  // there is none), and a new snapshot whose floats the caller then fills
  // (returned; drop(key) if that fails). An existing one for key is replaced.
  std::span<const float> data(uint64_t key) const;
  std::span<float> insert(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n, int pos);

  void count_lookup(bool hit) { ++(hit ? stats_.hits : stats_.misses); }
  StateSnapshotStats stats() const;

 private:
  struct Snapshot {
    uint64_t parent = 0;
    std::vector<int32_t> block_tokens;
    int pos = 0;
    HugeArray<float> data;
    std::list<uint64_t>::iterator lru_pos;
  };
  const Snapshot* find(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n) const;

  int max_slots_, interval_;
  uint64_t floats_;
  std::unordered_map<uint64_t, Snapshot> by_key_;
  std::list<uint64_t> lru_;  // front = least recently used
  StateSnapshotStats stats_;
};

}  // namespace spool
