// The eviction policies: LRU, LFU with exponential aging, LRU-2.
#include "weights/cache_policy.h"

#include <cmath>

#include "core/error.h"

namespace spool {
namespace {

class Lru final : public CachePolicy {
 public:
  const char* name() const override { return "lru"; }
  void on_insert(CacheMeta& m, uint64_t now) override { m = CacheMeta{now, 0, 0, now}; }
  void on_access(CacheMeta& m, uint64_t now) override { m.prev_use = m.last_use, m.last_use = now; }
  double keep_score(const CacheMeta& m, uint64_t) const override { return (double)m.last_use; }
};

class Lfu final : public CachePolicy {
 public:
  explicit Lfu(double half_life) : half_life_(half_life > 0 ? half_life : 256) {}
  const char* name() const override { return "lfu"; }
  void on_insert(CacheMeta& m, uint64_t now) override { m = CacheMeta{now, 0, 1.0, now}; }
  void on_access(CacheMeta& m, uint64_t now) override {
    m.freq = decayed(m, now) + 1.0;
    m.freq_tick = now;
    m.prev_use = m.last_use, m.last_use = now;
  }
  // Ties (equal counts) go to the least recently used.
  double keep_score(const CacheMeta& m, uint64_t now) const override {
    return decayed(m, now) + 1e-9 * (double)m.last_use / (double)(now + 1);
  }

 private:
  double decayed(const CacheMeta& m, uint64_t now) const {
    return m.freq * std::exp2(-(double)(now - m.freq_tick) / half_life_);
  }
  double half_life_;
};

class Lru2 final : public CachePolicy {
 public:
  const char* name() const override { return "lru2"; }
  void on_insert(CacheMeta& m, uint64_t now) override { m = CacheMeta{now, 0, 0, now}; }
  void on_access(CacheMeta& m, uint64_t now) override { m.prev_use = m.last_use, m.last_use = now; }
  // By the second most recent use; slots used once rank by their one use, below all others.
  double keep_score(const CacheMeta& m, uint64_t now) const override {
    return m.prev_use ? (double)m.prev_use + (double)now : (double)m.last_use;
  }
};

}  // namespace

std::unique_ptr<CachePolicy> make_cache_policy(const std::string& name, double half_life) {
  if (name == "lru") return std::make_unique<Lru>();
  if (name == "lfu") return std::make_unique<Lfu>(half_life);
  if (name == "lru2") return std::make_unique<Lru2>();
  throw Error("unknown cache policy '" + name + "' (expected lru, lfu or lru2)");
}

}  // namespace spool
