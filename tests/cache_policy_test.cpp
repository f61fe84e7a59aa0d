// The streaming store's eviction policies on their own (weights/cache_policy.*):
// which of a few slots each policy gives up first after a sequence of
// lookups. The store around them (quotas, pinning, prefetch) is tested in
// streaming_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "weights/cache_policy.h"

using namespace spool;

namespace {

// Slots named by a letter; a trace of lookups ("AB A C": a lookup a letter, ticks 1, 2, ...), loading a slot on
// its first lookup. Returns the slots from first evicted to last.
std::string eviction_order(const std::string& policy, const std::string& trace, double half_life = 256) {
  auto p = make_cache_policy(policy, half_life);
  std::map<char, CacheMeta> slots;
  uint64_t now = 0;
  for (char c : trace) {
    if (c == ' ') continue;
    ++now;
    auto it = slots.find(c);
    if (it == slots.end()) p->on_insert(slots[c], now);
    else p->on_access(it->second, now);
  }
  std::string order;
  while (!slots.empty()) {
    auto victim = slots.begin();
    for (auto it = slots.begin(); it != slots.end(); ++it)
      if (p->keep_score(it->second, now) < p->keep_score(victim->second, now)) victim = it;
    order += victim->first;
    slots.erase(victim);
  }
  return order;
}

}  // namespace

TEST(CachePolicy, LruGivesUpTheLeastRecentlyUsed) {
  EXPECT_EQ(eviction_order("lru", "ABC"), "ABC");
  EXPECT_EQ(eviction_order("lru", "ABC A"), "BCA");
  EXPECT_EQ(eviction_order("lru", "AAAA B C"), "ABC");  // how often does not matter
}

TEST(CachePolicy, LfuKeepsTheFrequentAndAgesOldCounts) {
  EXPECT_EQ(eviction_order("lfu", "AAAA B C"), "BCA");  // B and C once each: the older goes first
  EXPECT_EQ(eviction_order("lfu", "AAAA BB C"), "CBA");
  // Aging: six early uses of A against three late ones of B. With little aging A keeps more; with a half-life of
  // one lookup, A's count has faded below B's.
  EXPECT_EQ(eviction_order("lfu", "AAAAAA BBB", 1000), "BA");
  EXPECT_EQ(eviction_order("lfu", "AAAAAA BBB", 1), "AB");
}

TEST(CachePolicy, Lru2GivesUpOneOffLoadsFirst) {
  // B was used twice long ago, A and C once recently: LRU would give up B first, LRU-2 the one-off loads.
  EXPECT_EQ(eviction_order("lru", "BB A C"), "BAC");
  EXPECT_EQ(eviction_order("lru2", "BB A C"), "ACB");
  // Among slots used twice, the one whose second most recent use is older goes first.
  EXPECT_EQ(eviction_order("lru2", "AB AB B"), "AB");
}

TEST(CachePolicy, UnknownNameIsRefusedByName) {
  try {
    make_cache_policy("mru");
    ADD_FAILURE() << "an unknown policy was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("mru"), std::string::npos) << what;
    EXPECT_NE(what.find("lru2"), std::string::npos) << what;
  }
  for (const char* name : {"lru", "lfu", "lru2"}) EXPECT_EQ(std::string(make_cache_policy(name)->name()), name);
}
