// The streaming weight store against the resident one: identical logits
// (bitwise: both run the same unpacked kernels on these F32 fixtures) for an
// MLA+MoE model, a Mixtral-style MoE and a dense model, with a budget that
// holds everything and with the smallest budget the store accepts (every
// step evicts; the arena and resident set stay within the budget), for each
// eviction policy; a clear error when the budget is too small; and the CLI's
// --mem-budget + --stats-json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/session.h"
#include "weights/streaming_store.h"

using namespace spool;
using namespace spool::test;
namespace fs = std::filesystem;

namespace {

const std::string kGguf = std::string(SPOOL_SHARED_DIR) + "/fixtures/gguf/";
const char* kModels[] = {"deepseek3-tiny.f32.gguf", "mixtral-tiny.f32.gguf", "qwen2-tiny.f32.gguf",
                         "kimi-k3-tiny.f32.gguf"};  // K3: KDA + MLA, latent experts streamed per expert

std::unique_ptr<Model> load_streaming(const std::string& path, uint64_t weight_budget, const std::string& policy = "lru") {
  LoadOptions o;
  o.n_threads = 2;
  o.weight_budget = weight_budget;
  o.cache_policy = policy;
  return load_model(path, o);
}

uint64_t minimum_budget(const std::string& path) {
  auto m = load_streaming(path, 1ull << 30);
  return static_cast<StreamingStore&>(m->weights()).minimum_budget();
}

std::vector<int32_t> prompt_of(const Model& m) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((int32_t)((i * 37 + 11) % m.config().n_vocab));
  return ids;
}

// Logits of a prefill and of 6 greedy decode steps after it.
std::vector<float> run_logits(Model& m) {
  const std::vector<int32_t> prompt = prompt_of(m);
  const int V = m.config().n_vocab;
  Session s(m, 64, 5);  // prefill in batches of 5: batched steps and single-token steps
  std::vector<float> out = s.feed(prompt, true);
  for (int k = 0; k < 6; ++k) {
    const float* l = out.data() + out.size() - V;
    const int32_t next = (int32_t)(std::max_element(l, l + V) - l);
    const std::vector<float>& step = s.feed({next});
    out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class StreamingFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamingFixture, SameLogitsAsResidentWithRoomForEverything) {
  const std::string path = kGguf + GetParam();
  auto resident = load_model(path, LoadOptions{2});
  auto streaming = load_streaming(path, 256ull << 20);
  EXPECT_STREQ(streaming->weights().mode(), "streaming");
  EXPECT_TRUE(bitwise_equal(run_logits(*resident), run_logits(*streaming)));
}

TEST_P(StreamingFixture, SameLogitsUnderTheSmallestBudgetWithEvictionEveryStep) {
  const std::string path = kGguf + GetParam();
  const uint64_t budget = minimum_budget(path);
  auto resident = load_model(path, LoadOptions{2});
  const std::vector<float> want = run_logits(*resident);
  for (const char* policy : {"lru", "lfu", "lru2"}) {
    auto m = load_streaming(path, budget, policy);
    const StoreStats at_load = m->weights().stats_snapshot();
    EXPECT_LE(at_load.arena_bytes + at_load.resident_bytes, budget) << policy;
    EXPECT_GT(at_load.arena_bytes, 0u) << policy;
    EXPECT_TRUE(bitwise_equal(run_logits(*m), want)) << policy;

    // Decode steps one at a time: each evicts.
    Session s(*m, 32);
    s.feed(prompt_of(*m));
    for (int k = 0; k < 4; ++k) {
      const uint64_t before = m->weights().stats_snapshot().evictions;
      s.feed({(int32_t)(k + 1)});
      EXPECT_GT(m->weights().stats_snapshot().evictions, before) << policy << " step " << k;
    }
    const StoreStats st = m->weights().stats_snapshot();
    EXPECT_EQ(st.arena_bytes, at_load.arena_bytes);  // the arena never grows
    EXPECT_GT(st.bytes_read, st.load_bytes);
    uint64_t misses = 0, wait_ns = 0;
    for (const auto& l : st.layers) {
      misses += l.misses + l.inflight + l.prefetched;
      wait_ns += l.wait_ns;
    }
    EXPECT_GT(misses, 0u) << policy;
    EXPECT_GT(st.io_wait_ns, 0u) << policy;              // reads on demand are waited for
    EXPECT_EQ(wait_ns, st.io_wait_ns) << policy;         // and each wait is counted on its layer
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamingFixture, ::testing::ValuesIn(kModels));

TEST(Streaming, SpeculationIsScoredOnDeepseek) {
  auto m = load_streaming(kGguf + "deepseek3-tiny.f32.gguf", 256ull << 20);
  run_logits(*m);
  const StoreStats st = m->weights().stats_snapshot();
  EXPECT_GT(st.spec_predicted, 0u);
  EXPECT_GT(st.spec_routed, 0u);
  EXPECT_LE(st.spec_correct, st.spec_routed);
}

// Guesses are for decode steps: a prompt chunk routing to more than half the
// experts makes none (its own prefetch reads them), single tokens do. With
// adaptation off, so that the outcome does not depend on this disk's speed.
TEST(Streaming, NoGuessesForPromptChunksOnlyForDecodeSteps) {
  LoadOptions o;
  o.n_threads = 2;
  o.weight_budget = 256ull << 20;
  o.adapt_speculation = false;
  auto m = load_model(kGguf + "deepseek3-tiny.f32.gguf", o);
  ASSERT_GT(m->config().n_expert, 0);
  Session s(*m, 64);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 16; ++i) prompt.push_back(3 + 5 * i);  // 16 x top-2 routings over 8 experts
  s.feed(prompt);
  EXPECT_EQ(m->weights().stats_snapshot().spec_predicted, 0u);
  for (int k = 0; k < 3; ++k) s.feed({(int32_t)(7 + k)});
  EXPECT_GT(m->weights().stats_snapshot().spec_predicted, 0u);
}

TEST(Streaming, SpeculationAdaptsToIoWaitWithHysteresis) {
  EXPECT_FALSE(speculation_after_pass(true, 0.8));   // reads dominate: stop guessing
  EXPECT_FALSE(speculation_after_pass(false, 0.45)); // in between: stay off
  EXPECT_TRUE(speculation_after_pass(true, 0.45));   // ... or on
  EXPECT_TRUE(speculation_after_pass(false, 0.1));   // compute dominates: guess again
}

TEST(Streaming, QuantizedModelMatchesResidentClosely) {
  // Q8_0: the resident store repacks every matmul weight; the streaming store
  // packs its resident tensors and runs streamed experts unpacked, so results
  // agree to rounding, not bitwise.
  const std::string path = kGguf + "deepseek3-tiny.q8_0.gguf";
  auto resident = load_model(path, LoadOptions{2});
  auto m = load_streaming(path, minimum_budget(path));
  EXPECT_LE(rel_error(run_logits(*m), run_logits(*resident)), 1e-3f);
}

TEST(Streaming, BudgetTooSmallSaysHowMuchIsNeeded) {
  const std::string path = kGguf + "mixtral-tiny.f32.gguf";
  const uint64_t need = minimum_budget(path);
  try {
    load_streaming(path, need - 4096);
    FAIL() << "a budget below the minimum was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("memory budget too small"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at least"), std::string::npos) << msg;
  }
  LoadOptions o;
  o.n_threads = 2;
  o.mem_budget = 1u << 20;  // less than the scratch estimate alone
  try {
    load_model(path, o);
    FAIL() << "a 1 MiB budget was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give at least"), std::string::npos) << e.what();
  }
}

constexpr const char* kCliBudget = "48M";

TEST(Streaming, CliMemBudgetWritesStatsJson) {
  char tmpl[] = "/tmp/spool_stream_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl, json = dir / "stats.json";
  int status = -1;
  const std::string err = run_stdout(std::string(SPOOL_BIN) + " run -m " + kGguf + "deepseek3-tiny.f32.gguf" +
                                         " -t 2 -c 64 -b 8 -p 'Hello there' -n 4 --temp 0 --mem-budget " + kCliBudget +
                                         " --stats-json " + json.string() + " 2>&1 >/dev/null",
                                     &status);
  ASSERT_EQ(status, 0) << err;
  EXPECT_NE(err.find("streaming"), std::string::npos) << err;
  std::ifstream in(json);
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["mode"], "streaming");
  for (const char* k : {"bytes_read", "requests", "hit_rate", "io_wait_s", "compute_s", "peak_rss_bytes",
                        "decode_tok_s", "decode_bytes_per_token"})
    EXPECT_TRUE(j["total"].contains(k)) << k;
  EXPECT_GT(j["total"]["bytes_read"].get<uint64_t>(), 0u);
  EXPECT_GT(j["total"]["peak_rss_bytes"].get<uint64_t>(), 0u);
  // Each step's reads hold its units' tensor bytes, plus at most the alignment padding.
  for (const auto& step : j["per_token"]) {
    const uint64_t read = step["bytes_read"].get<uint64_t>(), payload = step["payload_bytes"].get<uint64_t>();
    EXPECT_LE(payload, read);
    EXPECT_EQ(payload == 0, read == 0);
  }
  EXPECT_LE(j["total"]["decode_payload_bytes_per_token"].get<double>(),
            j["total"]["decode_bytes_per_token"].get<double>());
  EXPECT_EQ(j["per_token"].size(), 1u + j["generated_tokens"].get<size_t>());  // the prompt step + each decode step
  EXPECT_TRUE(j["per_layer"].is_array());
  EXPECT_FALSE(j["per_layer"].empty());
  EXPECT_TRUE(j["speculative"].contains("accuracy"));
  EXPECT_TRUE(j.contains("ttft_s"));
  EXPECT_LE(j["store"]["arena_bytes"].get<uint64_t>() + j["store"]["resident_bytes"].get<uint64_t>(),
            j["store"]["budget_bytes"].get<uint64_t>());

  const std::string bad = run_stdout(std::string(SPOOL_BIN) + " run -m " + kGguf + "deepseek3-tiny.f32.gguf" +
                                         " -p hi -n 1 --mem-budget 2M 2>&1 >/dev/null",
                                     &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(bad.find("give at least"), std::string::npos) << bad;
  const std::string junk = run_stdout(std::string(SPOOL_BIN) + " run -m " + kGguf + "deepseek3-tiny.f32.gguf" +
                                          " -p hi -n 1 --mem-budget 12Q 2>&1 >/dev/null",
                                      &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(junk.find("invalid size"), std::string::npos) << junk;
  fs::remove_all(dir);
}

}  // namespace
