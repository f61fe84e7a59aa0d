// Paged KV cache and prefix index: reference counts, copy-on-write, the LRU
// of cached blocks (eviction order and callback), MLA shapes, chained keys.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "runtime/kv_paged.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"

using namespace spool;

namespace {

KvShape small_shape() {
  KvShape s;
  s.n_layer = 2;
  s.n_head_kv = 2;
  s.head_dim_k = 3;
  s.head_dim_v = 2;
  return s;
}

// Writes a value identifying (seq tag, layer, pos) into every K and V float of positions [begin, end).
void fill(PagedKvCache& kv, int seq, int begin, int end, float tag) {
  for (int l = 0; l < kv.shape().n_layer; ++l) {
    KvSeqView v = kv.view(l, seq);
    for (int p = begin; p < end; ++p) {
      for (int i = 0; i < v.k_row; ++i) v.k(p)[i] = tag + l * 1000 + p;
      for (int i = 0; i < v.v_row; ++i) v.v(p)[i] = -(tag + l * 1000 + p);
    }
  }
}

bool holds(PagedKvCache& kv, int seq, int begin, int end, float tag) {
  for (int l = 0; l < kv.shape().n_layer; ++l) {
    KvSeqView v = kv.view(l, seq);
    for (int p = begin; p < end; ++p) {
      for (int i = 0; i < v.k_row; ++i) if (v.k(p)[i] != tag + l * 1000 + p) return false;
      for (int i = 0; i < v.v_row; ++i) if (v.v(p)[i] != -(tag + l * 1000 + p)) return false;
    }
  }
  return true;
}

}  // namespace

TEST(KvPaged, AllocatesBlocksAndCountsBytes) {
  PagedKvCache kv(small_shape(), 4, 6, 64, 3);
  EXPECT_EQ(PagedKvCache::block_bytes(small_shape(), 4), 2u * 4 * (6 + 4) * 4);
  EXPECT_EQ(kv.bytes_allocated(), 6 * PagedKvCache::block_bytes(small_shape(), 4));
  EXPECT_EQ(kv.n_free(), 6);
  ASSERT_TRUE(kv.prepare_write(0, 0, 9));  // 3 blocks
  EXPECT_EQ(kv.table(0).size(), 3u);
  EXPECT_EQ(kv.n_held(), 3);
  fill(kv, 0, 0, 9, 1);
  EXPECT_TRUE(holds(kv, 0, 0, 9, 1));
  EXPECT_EQ(kv.blocks_needed(1, 0, 16), 4);
  EXPECT_FALSE(kv.prepare_write(1, 0, 16));  // 4 > 3 left: nothing changes
  EXPECT_TRUE(kv.table(1).empty());
  EXPECT_EQ(kv.n_free(), 3);
  EXPECT_THROW(kv.prepare_write(1, 0, 65), Error);  // beyond n_ctx
  kv.clear(0);
  EXPECT_EQ(kv.n_free(), 6);
  EXPECT_EQ(kv.n_held(), 0);
}

TEST(KvPaged, SharedBlocksAreCopiedOnWrite) {
  PagedKvCache kv(small_shape(), 4, 8, 64, 2);
  ASSERT_TRUE(kv.prepare_write(0, 0, 8));
  fill(kv, 0, 0, 8, 10);
  for (int b : kv.table(0)) kv.append_shared(1, b);
  EXPECT_EQ(kv.refcount(kv.table(0)[0]), 2);
  EXPECT_EQ(kv.table(1), kv.table(0));
  // Seq 1 rewrites position 6 (second block) and appends 8..10.
  EXPECT_EQ(kv.blocks_needed(1, 6, 11), 2);  // one copy, one new block
  ASSERT_TRUE(kv.prepare_write(1, 6, 11));
  EXPECT_EQ(kv.table(1)[0], kv.table(0)[0]);  // untouched block still shared
  EXPECT_NE(kv.table(1)[1], kv.table(0)[1]);  // copied
  EXPECT_EQ(kv.refcount(kv.table(0)[1]), 1);
  EXPECT_TRUE(holds(kv, 1, 0, 8, 10));        // the copy carries the contents
  fill(kv, 1, 6, 11, 20);
  EXPECT_TRUE(holds(kv, 0, 0, 8, 10));        // seq 0 does not see seq 1's writes
  EXPECT_TRUE(holds(kv, 1, 6, 11, 20));
  kv.clear(0);
  EXPECT_EQ(kv.refcount(kv.table(1)[0]), 1);
  kv.clear(1);
  EXPECT_EQ(kv.n_free(), 8);
}

TEST(KvPaged, CachedBlocksAreEvictedOldestReleasedFirst) {
  PagedKvCache kv(small_shape(), 2, 4, 64, 4);
  std::vector<int> evicted;
  kv.on_evict = [&](int b) { evicted.push_back(b); };
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(kv.prepare_write(s, 0, 2));
  const int a = kv.table(0)[0], b = kv.table(1)[0], c = kv.table(2)[0];
  for (int x : {a, b, c}) kv.set_cached(x, true);
  kv.clear(1);  // released first
  kv.clear(0);
  kv.clear(2);
  EXPECT_EQ(kv.n_cached(), 3);
  EXPECT_EQ(kv.n_free(), 1);
  EXPECT_EQ(kv.n_available(), 4);
  // Reusing a cached block takes it out of the LRU.
  kv.append_shared(3, a);
  EXPECT_EQ(kv.n_cached(), 2);
  // The free block goes first, then cached ones in release order (b, then c).
  const int f = kv.alloc();
  EXPECT_TRUE(evicted.empty());
  EXPECT_NE(f, a);
  EXPECT_EQ(kv.alloc(), b);
  EXPECT_EQ(kv.alloc(), c);
  EXPECT_EQ(evicted, (std::vector<int>{b, c}));
  EXPECT_FALSE(kv.is_cached(b));
  EXPECT_EQ(kv.alloc(), -1);  // a is held
  // Writing into a cached block copies it even when one sequence holds it.
  kv.unref(f);
  EXPECT_EQ(kv.blocks_needed(3, 0, 2), 1);
  ASSERT_TRUE(kv.prepare_write(3, 0, 2));
  EXPECT_NE(kv.table(3)[0], a);
  EXPECT_EQ(kv.n_cached(), 1);  // a went back to the LRU, still indexed
}

TEST(KvPaged, MlaShapeHasNoValueRows) {
  KvShape s;
  s.n_layer = 3;
  s.n_head_kv = 1;
  s.head_dim_k = 48;
  s.head_dim_v = 0;
  PagedKvCache kv(s, 16, 4, 64, 2);
  EXPECT_EQ(kv.bytes_allocated(), 4u * 3 * 16 * 48 * 4);
  ASSERT_TRUE(kv.prepare_write(0, 0, 20));
  fill(kv, 0, 0, 20, 5);
  kv.append_shared(1, kv.table(0)[0]);
  ASSERT_TRUE(kv.prepare_write(1, 15, 17));  // copy of block 0 plus a new block
  EXPECT_TRUE(holds(kv, 1, 0, 15, 5));
  EXPECT_TRUE(kv.view(0, 1).v_blocks.empty());
}

TEST(PrefixCache, MatchesLongestChainOfFullBlocks) {
  PagedKvCache kv(small_shape(), 4, 8, 64, 3);
  PrefixCache pc(kv);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_TRUE(kv.prepare_write(0, 0, 10));
  uint64_t key = PrefixCache::kRoot;
  for (int i = 0; i < 2; ++i) key = pc.insert(key, a.data() + 4 * i, kv.table(0)[i]);
  EXPECT_EQ(pc.size(), 2);
  EXPECT_EQ(pc.keys_of(a).size(), 2u);
  EXPECT_EQ(pc.keys_of(a)[1], key);
  EXPECT_EQ(pc.match(a, 8), (std::vector<int>{kv.table(0)[0], kv.table(0)[1]}));
  EXPECT_EQ(pc.match(a, 1).size(), 1u);
  std::vector<int32_t> b = a;
  b[5] = 99;  // second block differs
  EXPECT_EQ(pc.match(b, 8).size(), 1u);
  b[0] = 99;  // first block differs: the chain breaks even though block 2 would match alone
  EXPECT_TRUE(pc.match(b, 8).empty());
  std::vector<int32_t> c = {5, 6, 7, 8};  // a's second block, but at the start
  EXPECT_TRUE(pc.match(c, 8).empty());
  // A second block with the same prefix is not indexed again.
  ASSERT_TRUE(kv.prepare_write(1, 0, 4));
  EXPECT_EQ(pc.insert(PrefixCache::kRoot, a.data(), kv.table(1)[0]), pc.keys_of(a)[0]);
  EXPECT_FALSE(kv.is_cached(kv.table(1)[0]));
  // Released indexed blocks stay matchable until evicted; eviction drops the entry.
  kv.clear(0);
  kv.clear(1);
  EXPECT_EQ(kv.n_cached(), 2);
  EXPECT_EQ(pc.match(a, 8).size(), 2u);
  while (kv.n_cached() == 2) ASSERT_GE(kv.alloc(), 0);
  EXPECT_EQ(pc.size(), 1);
  EXPECT_EQ(pc.match(a, 8).size(), 1u);  // a released sequence's tail goes first, its head stays matchable
}

namespace spool {
namespace {

// Workflow hints: eviction takes unhinted cached blocks first (oldest first),
// then the hinted block whose next use is farthest; a cleared hint is plain LRU again.
TEST(KvPagedHints, EvictUnhintedFirstThenFarthestNextUse) {
  KvShape shape;
  shape.n_layer = 1;
  shape.n_head_kv = 1;
  shape.head_dim_k = 4;
  shape.head_dim_v = 4;
  PagedKvCache kv(shape, 4, 5, 64, 1);
  std::vector<int> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(kv.alloc());
  for (int b : blocks) kv.set_cached(b, true);
  for (int b : blocks) kv.unref(b);  // LRU order: blocks[0] oldest
  kv.set_hint(blocks[0], 3);
  kv.set_hint(blocks[1], 1);
  kv.set_hint(blocks[3], 3);
  EXPECT_EQ(kv.alloc(), blocks[2]);  // oldest unhinted
  EXPECT_EQ(kv.alloc(), blocks[4]);
  EXPECT_EQ(kv.alloc(), blocks[0]);  // all hinted: farthest next use, oldest among equals
  kv.set_hint(blocks[1], 0);         // cleared
  EXPECT_EQ(kv.alloc(), blocks[1]);
  EXPECT_EQ(kv.alloc(), blocks[3]);
  EXPECT_EQ(kv.alloc(), -1);
}


// The scheduler's retention rules under a full pool: a block that a hint or a
// waiting request names outlives an older unhinted one; plain LRU (kv_hints
// off) evicts the oldest.
std::vector<int32_t> seq_tokens(int first, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

int cached_blocks_of(Scheduler& s, const std::vector<int32_t>& tokens) {
  return (int)s.prefix_cache()->match(tokens, (int)tokens.size() / 4).size();
}

SchedOptions sched_options(int max_running, bool kv_hints) {
  SchedOptions so;
  so.max_running = max_running;
  so.max_batch_tokens = 64;
  so.kv_hints = kv_hints;
  return so;
}

void run_to_end(Scheduler& s, SchedRequest& r) {
  s.add(&r);
  for (int i = 0; i < 100 && r.n_computed < (int)r.tokens.size(); ++i) s.commit(s.plan());
  ASSERT_EQ(r.n_computed, (int)r.tokens.size());
  s.remove(&r);
}

struct HintCase {
  bool kv_hints;
  bool owner_hint;    // set_hints names A's prompt
  bool waiting_on_a;  // a request with A's prompt waits while C is admitted
  bool a_kept;        // expected: A's 4 blocks all still cached after C
};

TEST(SchedulerHints, HintedAndWaitingPrefixesOutliveOlderBlocks) {
  const HintCase cases[] = {{true, true, false, true},  {false, true, false, false}, {true, false, true, true},
                            {false, false, true, false}, {true, false, false, false}};
  for (const HintCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "kv_hints=" << c.kv_hints << " owner_hint=" << c.owner_hint
                                    << " waiting_on_a=" << c.waiting_on_a);
    PagedKvCache kv(small_shape(), 4, 12, 64, 2);
    Scheduler s(sched_options(1, c.kv_hints), kv);
    SchedRequest a, b, cr, d;
    a.tokens = seq_tokens(1, 16);  // 4 full blocks, the oldest cached
    b.tokens = seq_tokens(100, 16);
    cr.tokens = seq_tokens(200, 17);  // 5 blocks: 4 free + 1 evicted
    d.tokens = a.tokens;
    a.id = 1, b.id = 2, cr.id = 3, d.id = 4;
    a.arrival = 1, b.arrival = 2, cr.arrival = 3, d.arrival = 4;
    for (SchedRequest* r : {&a, &b, &cr, &d}) r->n_prompt = (int)r->tokens.size();
    run_to_end(s, a);
    run_to_end(s, b);
    ASSERT_EQ(cached_blocks_of(s, a.tokens), 4);
    ASSERT_EQ(kv.n_free(), 4);
    if (c.owner_hint) s.set_hints(7, {PrefixHint{a.tokens, 1}});
    s.add(&cr);
    if (c.waiting_on_a) s.add(&d);
    s.commit(s.plan());  // admits C (max_running 1: D keeps waiting)
    ASSERT_EQ(cr.slot >= 0, true);
    EXPECT_EQ(cached_blocks_of(s, a.tokens) == 4, c.a_kept);
    EXPECT_EQ(kv.n_cached(), 7);  // exactly one block evicted
    s.remove(&cr);
    s.remove(&d);
    s.set_hints(7, {});
  }
}


// A request that could start only by evicting blocks a waiting request will
// reuse waits while another runs; the one that reuses them starts first.
TEST(SchedulerHints, RequestThatWouldEvictHintedBlocksLetsTheirUserGoFirst) {
  for (bool hints : {true, false}) {
    SCOPED_TRACE(testing::Message() << "kv_hints=" << hints);
    PagedKvCache kv(small_shape(), 4, 12, 64, 3);
    Scheduler s(sched_options(3, hints), kv);
    SchedRequest a, run, big, user;
    a.tokens = seq_tokens(1, 16);      // 4 blocks, then cached
    run.tokens = seq_tokens(100, 15);  // 4 blocks, keeps running
    big.tokens = seq_tokens(200, 17);  // 5 blocks: needs one of A's
    user.tokens = seq_tokens(1, 18);   // A's 4 blocks + 1 new
    uint64_t n = 0;
    for (SchedRequest* r : {&a, &run, &big, &user}) r->id = r->arrival = ++n, r->n_prompt = (int)r->tokens.size();
    run_to_end(s, a);
    s.add(&run);
    s.commit(s.plan());  // run holds 4 blocks (its last token still to decode); 4 free, 4 cached (A)
    ASSERT_GE(run.slot, 0);
    s.add(&big);
    s.add(&user);
    s.commit(s.plan());
    if (hints) {
      EXPECT_LT(big.slot, 0);  // waits: it would evict A's blocks, which `user` is about to reuse
      EXPECT_GE(user.slot, 0);
      EXPECT_EQ(user.cached_tokens, 16);
    } else {
      EXPECT_GE(big.slot, 0);  // FCFS: big goes first and evicts one of A's blocks; no room is left for user
      EXPECT_LT(user.slot, 0);
    }
    for (SchedRequest* r : {&run, &big, &user}) s.remove(r);
  }
}

}  // namespace
}  // namespace spool
