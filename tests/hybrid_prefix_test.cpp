// Prefix reuse for hybrid (linear-attention) models through state snapshots
// (runtime/state_snapshots.h): requests that share a long prefix, served with
// snapshots on, give exactly the tokens and logprobs they give with prefix
// reuse off, while their prefix is restored (cached tokens > 0, fewer positions
// computed); after snapshots are evicted (LRU, or with their KV blocks) the
// outputs are still identical; the per-sequence state is freed on completion
// and cancel while the snapshots stay within their slots.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/kv_paged.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/state_snapshots.h"
#include "test_util.h"

using namespace spool;

namespace {

const std::string kFixtures = std::string(SPOOL_SHARED_DIR) + "/fixtures/";
const char* const kHybrids[] = {"qwen3next-tiny", "qwen35moe-tiny", "kimi-linear-tiny", "gguf/kimi-k3-tiny.f32.gguf"};

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int cached_tokens = -1;
  FinishReason reason = FinishReason::None;
};

// Submits prompts together (all at once) and waits for all of them.
std::vector<Output> run(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  std::vector<Output> out(prompts.size());
  std::vector<std::promise<void>> done(prompts.size());
  std::vector<std::future<void>> futs;
  for (auto& d : done) futs.push_back(d.get_future());
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams p;
    p.prompt = prompts[i];
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    p.top_logprobs = 0;
    e.submit(p, [&out, &done, i](const RequestEvent& ev) {
      out[i].tokens.insert(out[i].tokens.end(), ev.tokens.begin(), ev.tokens.end());
      for (const TokenLogprob& l : ev.logprobs) out[i].logprobs.push_back(l.logprob);
      if (ev.finished) {
        out[i].cached_tokens = ev.cached_tokens;
        out[i].reason = ev.reason;
        done[i].set_value();
      }
    });
  }
  for (auto& f : futs) EXPECT_EQ(f.wait_for(std::chrono::seconds(300)), std::future_status::ready);
  return out;
}

std::vector<int32_t> pseudo_tokens(int n, int seed, int n_vocab) {
  std::vector<int32_t> t;
  for (int j = 0; j < n; ++j) t.push_back((int32_t)((7 + 31 * seed + 13 * j + (j * j) % 17 + seed * j) % (n_vocab - 10) + 5));
  return t;
}

// A shared prefix of n_prefix tokens, then a distinct suffix per prompt.
std::vector<std::vector<int32_t>> shared_prefix_prompts(int n_vocab, int n_prefix, int n_prompts) {
  const std::vector<int32_t> prefix = pseudo_tokens(n_prefix, 1, n_vocab);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n_prompts; ++i) {
    std::vector<int32_t> p = prefix;
    for (int32_t t : pseudo_tokens(6 + 5 * i, 100 + i, n_vocab)) p.push_back(t);
    out.push_back(p);
  }
  return out;
}

EngineOptions base_options() {
  EngineOptions o;
  o.n_ctx = 512;
  o.max_running = 4;
  o.max_batch_tokens = 160;  // prompts split over steps (at multiples of 64 for hybrids)
  o.block_size = 16;
  return o;
}

void expect_same(const std::vector<Output>& got, const std::vector<Output>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].reason, FinishReason::Length) << "request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << "request " << i;
    for (size_t t = 0; t < got[i].logprobs.size(); ++t)
      EXPECT_EQ(got[i].logprobs[t], want[i].logprobs[t]) << "request " << i << " token " << t;  // bitwise
  }
}

bool wait_idle(Engine& e) {
  for (int i = 0; i < 500; ++i) {
    const EngineStats s = e.stats();
    if (s.running == 0 && s.waiting == 0 && s.recurrent_sequences == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class HybridPrefix : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { model_ = load_model(kFixtures + GetParam(), LoadOptions{2}); }
  std::unique_ptr<Model> model_;
};

TEST_P(HybridPrefix, SharedPrefixRestoredGivesTheSameTokensAndLogprobs) {
  const auto prompts = shared_prefix_prompts(model_->config().n_vocab, 200, 4);
  const int n = 8;
  // Reference: no prefix reuse; each prompt computed in full, one request at a time.
  std::vector<Output> want;
  uint64_t computed_off = 0;
  {
    auto e = make_engine(*model_, base_options());
    EXPECT_FALSE(e->stats().prefix_cache);
    for (const auto& p : prompts) want.push_back(run(*e, {p}, n)[0]);
    computed_off = e->stats().computed_tokens;
  }
  EngineOptions o = base_options();
  o.state_snapshots = 4;
  o.snapshot_interval = 64;
  auto e = make_engine(*model_, o);
  EXPECT_TRUE(e->stats().prefix_cache);
  {  // The snapshots' bytes come out of the KV pool (the memory reserved for KV holds both).
    const uint64_t bb = PagedKvCache::block_bytes(model_->kv_shape(), o.block_size);
    const int taken = (int)((4 * model_->kv_shape().recurrent.bytes_per_seq() + bb - 1) / bb);
    EXPECT_GT(taken, 0);
    EXPECT_EQ(e->stats().kv_blocks_total, 4 * 512 / 16 - taken);
    EngineOptions too_many = o;
    too_many.state_snapshots = 10000;
    EXPECT_THROW(make_engine(*model_, too_many), Error);
  }
  // The first request computes the prefix (snapshots at 64, 128, 192); the others, submitted together,
  // restore the state at 192 and share the KV blocks up to it.
  std::vector<Output> got = run(*e, {prompts[0]}, n);
  const std::vector<Output> rest = run(*e, {prompts[1], prompts[2], prompts[3]}, n);
  got.insert(got.end(), rest.begin(), rest.end());
  expect_same(got, want);
  EXPECT_EQ(got[0].cached_tokens, 0);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(got[i].cached_tokens, 192) << "request " << i;
  ASSERT_TRUE(wait_idle(*e));
  const EngineStats s = e->stats();
  EXPECT_EQ(s.state_snapshot_hits, 3u);
  EXPECT_EQ(s.state_snapshot_misses, 1u);  // the first request
  EXPECT_EQ(s.prefix_hit_tokens, 3u * 192);
  EXPECT_EQ(s.computed_tokens + 3 * 192, computed_off);
  EXPECT_GT(s.state_snapshots, 0);
  EXPECT_LE(s.state_snapshots, 4);
  EXPECT_EQ(s.state_snapshot_bytes, (uint64_t)s.state_snapshots * model_->kv_shape().recurrent.bytes_per_seq());
  // Per-sequence states are gone; the snapshots are what is left.
  EXPECT_EQ(s.recurrent_state_bytes, 0u);
  EXPECT_EQ(s.recurrent_sequences, 0);
}

TEST_P(HybridPrefix, AllSubmittedTogetherComputeThePrefixOnce) {
  const auto prompts = shared_prefix_prompts(model_->config().n_vocab, 150, 4);
  const int n = 6;
  std::vector<Output> want;
  {
    auto e = make_engine(*model_, base_options());
    for (const auto& p : prompts) want.push_back(run(*e, {p}, n)[0]);
  }
  EngineOptions o = base_options();
  o.state_snapshots = 2;
  o.snapshot_interval = 64;
  auto e = make_engine(*model_, o);
  const std::vector<Output> got = run(*e, prompts, n);  // the others wait for the first one's prefix blocks
  expect_same(got, want);
  int restored = 0;
  for (const Output& g : got) restored += g.cached_tokens == 128;
  EXPECT_EQ(restored, 3);
  ASSERT_TRUE(wait_idle(*e));
  EXPECT_EQ(e->stats().state_snapshot_hits, 3u);
}

TEST_P(HybridPrefix, EvictedSnapshotsStillGiveIdenticalOutputs) {
  const int V = model_->config().n_vocab, n = 6;
  // Three prompts that share 150, 200 and 100 tokens of one prefix.
  const auto base = shared_prefix_prompts(V, 200, 1)[0];
  std::vector<std::vector<int32_t>> prompts = {base};
  for (int keep : {150, 200, 100}) {
    std::vector<int32_t> p(base.begin(), base.begin() + keep);
    for (int32_t t : pseudo_tokens(9, 300 + keep, V)) p.push_back(t);
    prompts.push_back(p);
  }
  std::vector<Output> want;
  {
    auto e = make_engine(*model_, base_options());
    for (const auto& p : prompts) want.push_back(run(*e, {p}, n)[0]);
  }
  // One slot: the first request's snapshot at 192 pushes out those at 64 and 128, so the prompt sharing
  // 150 tokens finds none (a miss: computed in full; it leaves the one at 128), the one sharing 200 restores
  // 128 (192 is gone) and leaves 192, and the one sharing 100 finds none.
  EngineOptions o = base_options();
  o.state_snapshots = 1;
  o.snapshot_interval = 64;
  auto e = make_engine(*model_, o);
  std::vector<Output> got;
  for (const auto& p : prompts) got.push_back(run(*e, {p}, n)[0]);
  expect_same(got, want);
  EXPECT_EQ(got[1].cached_tokens, 0);
  EXPECT_EQ(got[2].cached_tokens, 128);
  EXPECT_EQ(got[3].cached_tokens, 0);
  ASSERT_TRUE(wait_idle(*e));
  EXPECT_EQ(e->stats().state_snapshots, 1);
  EXPECT_EQ(e->stats().state_snapshot_hits, 1u);
  EXPECT_EQ(e->stats().state_snapshot_misses, 3u);

  // A pool so small that another request's blocks evict the prefix's: its snapshot goes with them.
  EngineOptions tight = o;
  tight.state_snapshots = 4;
  tight.snapshot_interval = 128;
  tight.n_ctx = 256;
  // 256 positions, plus the blocks the snapshots take out of the pool.
  const uint64_t bb = PagedKvCache::block_bytes(model_->kv_shape(), 16);
  tight.kv_bytes = bb * (16 + (4 * model_->kv_shape().recurrent.bytes_per_seq() + bb - 1) / bb);
  auto e2 = make_engine(*model_, tight);
  ASSERT_EQ(e2->stats().kv_blocks_total, 16);
  const Output first = run(*e2, {prompts[0]}, n)[0];
  expect_same({first}, {want[0]});
  ASSERT_TRUE(wait_idle(*e2));
  EXPECT_EQ(e2->stats().state_snapshots, 1);
  const Output other = run(*e2, {pseudo_tokens(230, 7, V)}, n)[0];  // needs 15 of the 16 blocks
  EXPECT_EQ(other.reason, FinishReason::Length);
  ASSERT_TRUE(wait_idle(*e2));
  EXPECT_EQ(e2->stats().state_snapshots, 1);  // its own at 128; the prefix's left with its blocks
  const Output again = run(*e2, {prompts[2]}, n)[0];
  EXPECT_EQ(again.cached_tokens, 0);
  expect_same({again}, {want[2]});
}

TEST_P(HybridPrefix, CancelFreesTheStateKeepsSnapshots) {
  const auto prompts = shared_prefix_prompts(model_->config().n_vocab, 140, 2);
  EngineOptions o = base_options();
  o.state_snapshots = 2;
  o.snapshot_interval = 64;
  auto e = make_engine(*model_, o);
  run(*e, {prompts[0]}, 2);
  std::promise<void> done;
  int events = 0;
  RequestParams p;
  p.prompt = prompts[1];
  p.max_tokens = 300;
  p.ignore_eos = true;
  RequestId id = 0;
  std::promise<void> started;
  id = e->submit(p, [&](const RequestEvent& ev) {
    if (++events == 2) started.set_value();
    if (ev.finished) done.set_value();
  });
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(e->stats().recurrent_sequences, 1);
  e->cancel(id);
  ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  ASSERT_TRUE(wait_idle(*e));
  const EngineStats s = e->stats();
  EXPECT_EQ(s.recurrent_state_bytes, 0u);
  EXPECT_EQ(s.state_snapshot_hits, 1u);
  EXPECT_EQ(s.state_snapshots, 2);
}

// A pool too small for all four: preempted requests come back through their prefix's snapshot (or from
// scratch) and still give the tokens they give alone; no state is left behind.
TEST_P(HybridPrefix, PreemptedRequestsRestoreAndMatch) {
  const auto prompts = shared_prefix_prompts(model_->config().n_vocab, 140, 4);
  const int n = 24;
  std::vector<Output> want;
  {
    auto e = make_engine(*model_, base_options());
    for (const auto& p : prompts) want.push_back(run(*e, {p}, n)[0]);
  }
  EngineOptions o = base_options();
  o.state_snapshots = 4;
  o.snapshot_interval = 64;
  o.n_ctx = 256;
  o.max_batch_tokens = 96;
  const uint64_t bb = PagedKvCache::block_bytes(model_->kv_shape(), 16);
  o.kv_bytes = bb * (18 + (4 * model_->kv_shape().recurrent.bytes_per_seq() + bb - 1) / bb);
  auto e = make_engine(*model_, o);
  ASSERT_EQ(e->stats().kv_blocks_total, 18);
  const std::vector<Output> got = run(*e, prompts, n);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].reason, FinishReason::Length) << "request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;  // recomputed decode steps: tokens, not bits
  }
  ASSERT_TRUE(wait_idle(*e));
  const EngineStats s = e->stats();
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_GT(s.state_snapshot_hits, 0u);
  EXPECT_EQ(s.recurrent_state_bytes, 0u);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Hybrid, HybridPrefix, ::testing::ValuesIn(kHybrids), [](const auto& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!isalnum((unsigned char)c)) c = '_';
  return s;
});

// The snapshot store alone: LRU order, key verification, restore.
TEST(StateSnapshotsTest, LruVerifiesKeysAndRestores) {
  RecurrentShape shape;
  shape.conv_floats = {3, 0};
  shape.ssm_floats = {4, 0};
  RecurrentState rs(shape, 2);
  rs.ensure(0);
  for (int i = 0; i < 3; ++i) rs.conv(0, 0)[i] = (float)i + 1;
  for (int i = 0; i < 4; ++i) rs.ssm(0, 0)[i] = (float)i + 10;
  rs.set_n_tokens(0, 64);
  StateSnapshots ss(2, 64, state_floats(shape));
  const int32_t toks[2] = {5, 6}, other[2] = {5, 7};
  ss.save(11, 1, toks, 2, 64, rs, 0);
  EXPECT_TRUE(ss.has(11, 1, toks, 2));
  EXPECT_FALSE(ss.has(11, 2, toks, 2));   // another parent: a hash collision, not this prefix
  EXPECT_FALSE(ss.has(11, 1, other, 2));  // other tokens
  EXPECT_EQ(ss.restore(11, 1, other, 2, rs, 1), -1);
  EXPECT_EQ(ss.restore(11, 1, toks, 2, rs, 1), 64);
  EXPECT_EQ(rs.n_tokens(1), 64);
  EXPECT_EQ(rs.conv(0, 1)[2], 3.0f);
  EXPECT_EQ(rs.ssm(0, 1)[3], 13.0f);
  rs.set_n_tokens(0, 128);
  ss.save(12, 11, toks, 2, 128, rs, 0);
  EXPECT_TRUE(ss.has(11, 1, toks, 2));
  EXPECT_EQ(ss.restore(11, 1, toks, 2, rs, 1), 64);  // 11 is now the most recently used
  rs.set_n_tokens(0, 192);
  ss.save(13, 12, toks, 2, 192, rs, 0);  // evicts 12
  EXPECT_FALSE(ss.has(12, 11, toks, 2));
  EXPECT_TRUE(ss.has(11, 1, toks, 2));
  EXPECT_EQ(ss.stats().count, 2);
  EXPECT_EQ(ss.stats().bytes, 2 * 7 * sizeof(float));
  EXPECT_EQ(ss.stats().evicted, 1u);
  ss.drop(11);
  EXPECT_EQ(ss.stats().count, 1);
}

}  // namespace
