// Hybrid (Gated DeltaNet) models in the serving engine: four sequences
// decoded in one batch give the tokens each gives alone (and a Session's
// greedy decode); the per-sequence recurrent state is held while a request
// runs and freed on completion, on cancel and on preemption (which recomputes
// from scratch); prefix reuse is off for these models and says so in the stats.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/engine.h"
#include "test_util.h"

using namespace spool;

namespace {

const std::string kFixtures = std::string(SPOOL_SHARED_DIR) + "/fixtures/";
const char* const kHybrids[] = {"qwen3next-tiny", "qwen35moe-tiny"};

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::None;
};

// Submits every prompt (all at once, or each after the previous finished) and
// returns the generated tokens.
std::vector<Collected> run(Engine& e, const std::vector<std::vector<int32_t>>& prompts, int n, bool together) {
  std::vector<Collected> out(prompts.size());
  std::vector<std::promise<void>> done(prompts.size());
  std::vector<std::future<void>> futs;
  for (auto& d : done) futs.push_back(d.get_future());
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams p;
    p.prompt = prompts[i];
    p.max_tokens = n;
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    e.submit(p, [&out, &done, i](const RequestEvent& ev) {
      out[i].tokens.insert(out[i].tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished) {
        out[i].reason = ev.reason;
        done[i].set_value();
      }
    });
    if (!together) EXPECT_EQ(futs[i].wait_for(std::chrono::seconds(120)), std::future_status::ready);
  }
  for (auto& f : futs)
    if (f.valid() && together) EXPECT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  return out;
}

std::vector<std::vector<int32_t>> prompts_for(const Model& m) {
  const int V = m.config().n_vocab;
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 5 + 9 * i; ++j) p.push_back((int32_t)((11 + 37 * i + 13 * j + i * j) % (V - 10) + 5));
    out.push_back(p);
  }
  return out;
}

class GdnEngine : public ::testing::TestWithParam<const char*> {};

TEST_P(GdnEngine, BatchedDecodeEqualsOneAtATime) {
  auto model = load_model(kFixtures + GetParam(), LoadOptions{2});
  const auto prompts = prompts_for(*model);
  const int n = 16;
  EngineOptions o;
  o.n_ctx = 96;
  o.max_batch_tokens = 12;  // prompts split over steps and mixed with the others' decodes
  o.block_size = 8;
  auto engine = make_engine(*model, o);
  EXPECT_FALSE(engine->stats().prefix_cache);  // a recurrent state cannot be rebuilt from shared blocks
  const auto alone = run(*engine, prompts, n, false);
  const auto together = run(*engine, prompts, n, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> want = test::greedy(*model, prompts[i], n);
    EXPECT_EQ(test::join(alone[i].tokens), test::join(want)) << "prompt " << i;
    EXPECT_EQ(test::join(together[i].tokens), test::join(want)) << "prompt " << i;
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.recurrent_sequences, 0);  // freed on completion
  EXPECT_EQ(s.recurrent_state_bytes, 0u);
  EXPECT_EQ(s.prefix_hit_tokens, 0u);
}

TEST_P(GdnEngine, PreemptionRecomputesFromScratch) {
  auto model = load_model(kFixtures + GetParam(), LoadOptions{2});
  const auto prompts = prompts_for(*model);
  const int n = 24;
  EngineOptions o;
  o.n_ctx = 96;
  o.block_size = 8;
  o.max_batch_tokens = 16;
  const KvShape shape = model->kv_shape();
  // 10 blocks of the one attention layer: not enough for all four at once.
  o.kv_bytes = 10 * (uint64_t)shape.n_layer * o.block_size * (shape.k_row() + shape.v_row()) * sizeof(float);
  auto engine = make_engine(*model, o);
  const auto out = run(*engine, prompts, n, true);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(test::join(out[i].tokens), test::join(test::greedy(*model, prompts[i], n))) << "prompt " << i;
  EXPECT_GT(engine->stats().preemptions, 0u);
  EXPECT_EQ(engine->stats().recurrent_sequences, 0);
}

TEST_P(GdnEngine, StateHeldWhileRunningFreedOnCancel) {
  auto model = load_model(kFixtures + GetParam(), LoadOptions{2});
  EngineOptions o;
  o.n_ctx = 2048;
  std::mutex mu;
  std::condition_variable cv;
  int seen = 0;
  std::promise<FinishReason> finished;
  auto engine = make_engine(*model, o);
  RequestParams p;
  p.prompt = {5, 17, 42};
  p.max_tokens = 2000;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  const RequestId id = engine->submit(p, [&](const RequestEvent& ev) {
    if (ev.finished) finished.set_value(ev.reason);
    std::lock_guard<std::mutex> l(mu);
    ++seen;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return seen >= 5; });
  }
  const EngineStats during = engine->stats();
  EXPECT_EQ(during.recurrent_sequences, 1);
  EXPECT_EQ(during.recurrent_state_bytes, model->kv_shape().recurrent.bytes_per_seq());
  engine->cancel(id);
  EXPECT_EQ(finished.get_future().get(), FinishReason::Cancelled);
  // The stats are published at the end of the step that released it.
  for (int i = 0; i < 100 && engine->stats().recurrent_sequences != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine->stats().recurrent_sequences, 0);
  EXPECT_EQ(engine->stats().recurrent_state_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Hybrid, GdnEngine, ::testing::ValuesIn(kHybrids), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
});

}  // namespace
