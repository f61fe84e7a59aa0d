// The serving scheduler on its own (runtime/scheduler.*), without a model:
// the step plan (decodes first, then prefill chunks within the token budget),
// admission order (priority, then arrival), prefix sharing at admission,
// preemption of the lowest-priority youngest request when blocks run out,
// failing a request that can never fit, and the bookkeeping of drafted rows.
// The retention hints have their own tests in kv_paged_test.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/kv_paged.h"
#include "runtime/scheduler.h"

using namespace spool;

namespace {

KvShape shape() {
  KvShape s;
  s.n_layer = 1;
  s.n_head_kv = 1;
  s.head_dim_k = 2;
  s.head_dim_v = 2;
  return s;
}

SchedOptions options(int max_running, int max_batch_tokens, bool prefix_cache = false) {
  SchedOptions o;
  o.max_running = max_running;
  o.max_batch_tokens = max_batch_tokens;
  o.prefix_cache = prefix_cache;
  return o;
}

void init(SchedRequest& r, uint64_t id, std::vector<int32_t> prompt, int priority = 0) {
  r.id = r.arrival = id;
  r.priority = priority;
  r.tokens = std::move(prompt);
  r.n_prompt = (int)r.tokens.size();
}

std::vector<int32_t> tokens(int first, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

// One step: plan, commit, and a sampled token for every chunk that asked for logits.
std::vector<StepChunk> step(Scheduler& s) {
  std::vector<StepChunk> plan = s.plan();
  s.commit(plan);
  for (const StepChunk& c : plan)
    if (c.logits) c.req->tokens.push_back(7);
  return plan;
}

const StepChunk* chunk_of(const std::vector<StepChunk>& plan, const SchedRequest& r) {
  for (const StepChunk& c : plan)
    if (c.req == &r) return &c;
  return nullptr;
}

}  // namespace

TEST(Scheduler, DecodesFirstThenPrefillChunksWithinTheTokenBudget) {
  PagedKvCache kv(shape(), 4, 64, 256, 4);
  Scheduler s(options(4, 8), kv);
  SchedRequest a, b;
  init(a, 1, tokens(100, 20));
  s.add(&a);
  // A's prompt in chunks of the budget; logits only where the chunk reaches its end.
  std::vector<StepChunk> p = step(s);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].begin, 0);
  EXPECT_EQ(p[0].n, 8);
  EXPECT_FALSE(p[0].logits);
  p = step(s);
  EXPECT_EQ(p[0].begin, 8);
  EXPECT_EQ(p[0].n, 8);
  p = step(s);
  EXPECT_EQ(p[0].begin, 16);
  EXPECT_EQ(p[0].n, 4);
  EXPECT_TRUE(p[0].logits);
  EXPECT_EQ(a.n_computed, 20);
  ASSERT_EQ(a.tokens.size(), 21u);  // its first sampled token is pending
  // B arrives: A's decode goes first, B's prefill takes what is left of the budget.
  init(b, 2, tokens(300, 10));
  s.add(&b);
  p = step(s);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].req, &a);
  EXPECT_EQ(p[0].begin, 20);
  EXPECT_EQ(p[0].n, 1);
  EXPECT_TRUE(p[0].logits);
  EXPECT_EQ(p[1].req, &b);
  EXPECT_EQ(p[1].begin, 0);
  EXPECT_EQ(p[1].n, 7);
  EXPECT_FALSE(p[1].logits);
  int rows = 0;
  for (const StepChunk& c : step(s)) rows += c.n;
  EXPECT_LE(rows, 8);
  EXPECT_EQ(b.n_computed, 10);
  s.remove(&a);
  s.remove(&b);
  EXPECT_EQ(kv.n_held(), 0);  // every block back
}

TEST(Scheduler, AdmitsByPriorityThenArrival) {
  PagedKvCache kv(shape(), 4, 64, 256, 1);
  Scheduler s(options(1, 64), kv);
  SchedRequest early_low, late_high, later_high;
  init(early_low, 1, tokens(10, 5), 0);
  init(late_high, 2, tokens(20, 5), 5);
  init(later_high, 3, tokens(30, 5), 5);
  for (SchedRequest* r : {&early_low, &late_high, &later_high}) s.add(r);
  std::vector<const SchedRequest*> order;
  for (int i = 0; i < 3; ++i) {
    const std::vector<StepChunk> p = step(s);
    ASSERT_EQ(p.size(), 1u);  // one slot: one request at a time
    order.push_back(p[0].req);
    s.remove(p[0].req);
  }
  EXPECT_EQ(order, (std::vector<const SchedRequest*>{&late_high, &later_high, &early_low}));
}

TEST(Scheduler, SharesCachedPrefixBlocksAtAdmission) {
  PagedKvCache kv(shape(), 4, 64, 256, 2);
  Scheduler s(options(2, 64, true), kv);
  SchedRequest a, b;
  init(a, 1, tokens(100, 16));
  s.add(&a);
  step(s);
  s.remove(&a);  // its 4 full blocks stay cached
  std::vector<int32_t> pb = tokens(100, 12);
  for (int32_t t : tokens(500, 6)) pb.push_back(t);
  init(b, 2, pb);
  s.add(&b);
  const std::vector<StepChunk> p = step(s);
  const StepChunk* c = chunk_of(p, b);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->begin, 12);  // three shared blocks, not computed again
  EXPECT_EQ(c->n, 6);
  EXPECT_EQ(b.cached_tokens, 12);
  EXPECT_EQ(s.prefix_hit_tokens(), 12u);
  s.remove(&b);
}

TEST(Scheduler, PreemptsTheLowestPriorityYoungestWhenBlocksRunOut) {
  // 6 blocks of 4 positions; two requests of 8 tokens take 4 blocks, and their decodes need more.
  PagedKvCache kv(shape(), 4, 6, 64, 3);
  Scheduler s(options(3, 64), kv);
  SchedRequest old_req, young_req;
  init(old_req, 1, tokens(100, 8));
  init(young_req, 2, tokens(200, 8));
  s.add(&old_req);
  s.add(&young_req);
  for (int i = 0; i < 12 && s.preemptions() == 0; ++i) step(s);
  ASSERT_EQ(s.preemptions(), 1u);
  // The younger request gave its blocks back and waits, to be recomputed with what it generated.
  ASSERT_EQ(s.waiting().size(), 1u);
  EXPECT_EQ(s.waiting()[0], &young_req);
  EXPECT_EQ(young_req.n_computed, 0);
  EXPECT_GT((int)young_req.tokens.size(), young_req.n_prompt);
  EXPECT_GT(old_req.n_computed, 8);
  s.remove(&old_req);
  // Readmitted: its prompt and generated tokens are computed again.
  const int had = (int)young_req.tokens.size();
  for (int i = 0; i < 4 && young_req.n_computed < had; ++i) step(s);
  EXPECT_GE(young_req.n_computed, had);
  s.remove(&young_req);
  EXPECT_EQ(kv.n_held(), 0);
}

TEST(Scheduler, FailsARequestThatCannotFitEvenAlone) {
  PagedKvCache kv(shape(), 4, 3, 64, 2);  // 12 positions in all
  Scheduler s(options(2, 64), kv);
  SchedRequest big, small;
  init(big, 1, tokens(100, 20));
  init(small, 2, tokens(200, 5));
  s.add(&big);
  s.add(&small);
  const std::vector<StepChunk> p = s.plan();
  const std::vector<SchedRequest*> failed = s.take_failed();
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], &big);
  EXPECT_FALSE(big.error.empty());
  ASSERT_NE(chunk_of(p, small), nullptr);  // the others go on
  s.commit(p);
  s.remove(&small);
}

TEST(Scheduler, DraftedRowsAreCommittedOnlyWhenAccepted) {
  PagedKvCache kv(shape(), 4, 8, 64, 2);
  Scheduler s(options(2, 64), kv);
  SchedRequest a;
  init(a, 1, tokens(100, 6));
  s.add(&a);
  step(s);  // prefill; a sampled token pending at position 6
  std::vector<StepChunk> p = s.plan();
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].n, 1);
  ASSERT_TRUE(s.extend_with_draft(p[0], 3));
  EXPECT_EQ(p[0].n, 4);
  EXPECT_EQ(p[0].n_draft, 3);
  s.commit(p);
  EXPECT_EQ(a.n_computed, 7);  // the pending token only
  for (int32_t t : {8, 9}) a.tokens.push_back(t);  // two drafted tokens accepted
  s.commit_accepted(&a, 2);
  EXPECT_EQ(a.n_computed, 9);
  a.tokens.push_back(10);  // the bonus token, pending
  // A draft needing more blocks than are free is refused and leaves the chunk as it was.
  p = s.plan();
  ASSERT_EQ(p.size(), 1u);
  const int free_positions = kv.n_available() * 4 + (int)kv.table(a.slot).size() * 4 - (int)a.tokens.size();
  EXPECT_FALSE(s.extend_with_draft(p[0], free_positions + 1));
  EXPECT_EQ(p[0].n, 1);
  EXPECT_EQ(p[0].n_draft, 0);
  s.commit(p);
  EXPECT_EQ(a.n_computed, 10);
  s.remove(&a);
  EXPECT_EQ(kv.n_held(), 0);
}
