// Eviction policies of the streaming store's slot cache. A policy keeps its
// own bookkeeping in each slot's CacheMeta and ranks evictable slots; the
// store decides which slots are evictable (unpinned, loaded, not a prefetch
// the model has yet to use) and applies the per-layer quota (a layer over its
// share of slots gives up its own first), so a policy only orders candidates.
//   lru   least recently used
//   lfu   least frequently used, counts halved every `half_life` lookups (aging)
//   lru2  LRU-2: by the time of the second most recent use (one-off loads go first)
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace spool {

struct CacheMeta {
  uint64_t last_use = 0;  // store tick of the latest lookup
  uint64_t prev_use = 0;  // the one before (0: none)
  double freq = 0;        // decayed use count (lfu)
  uint64_t freq_tick = 0; // tick freq was last brought up to date
};

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;
  virtual const char* name() const = 0;
  // A unit was loaded into the slot (fresh metadata) / looked up again.
  virtual void on_insert(CacheMeta& m, uint64_t now) = 0;
  virtual void on_access(CacheMeta& m, uint64_t now) = 0;
  // Lower keeps less: the evictable slot with the lowest score goes first.
  virtual double keep_score(const CacheMeta& m, uint64_t now) const = 0;
};

// "lru", "lfu" or "lru2"; throws spool::Error naming the valid ones otherwise.
// half_life: lookups after which an lfu count has halved.
std::unique_ptr<CachePolicy> make_cache_policy(const std::string& name, double half_life = 256);

}  // namespace spool
