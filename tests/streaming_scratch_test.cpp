// Activation scratch and prefill passes under a memory budget: the scratch
// estimate covers what a prefill really allocates (heap growth, measured);
// MLA attention and the dense FFN, which go through long batches in token
// chunks with buffers shared by every layer, give the same logits as short
// batches (batch-invariant matmul, so any difference is a chunking error);
// streaming equals resident for a whole prompt in one pass; the residency plan
// keeps more bytes resident as the budget grows and stays inside it; and
// `spool run` without -b prefills a prompt in one pass under a budget, and one
// pass reads each streamed weight at most once where small batches re-read,
// and read-ahead never makes a pass read a unit twice, whatever the timing.
#include <gtest/gtest.h>
#include <malloc.h>
#if defined(SPOOL_SANITIZED)
#include <sanitizer/allocator_interface.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "format/gguf.h"
#include "kernels/matmul.h"
#include "model/gdn_config.h"
#include "model/model.h"
#include "runtime/session.h"
#include "weights/streaming_store.h"

using namespace spool;
using namespace spool::test;
namespace fs = std::filesystem;

namespace {

const std::string kGguf = std::string(SPOOL_SHARED_DIR) + "/fixtures/gguf/";

// Bytes the allocator has handed out and not taken back. Sanitizer builds
// replace malloc, so glibc's figures stay flat there: ask the sanitizer's.
uint64_t heap_in_use() {
#if defined(SPOOL_SANITIZED)
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
}

std::vector<int32_t> long_prompt(const Model& m, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((int32_t)((i * 37 + 11) % m.config().n_vocab));
  return ids;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<Model> load_streaming(const std::string& path, uint64_t weight_budget) {
  LoadOptions o;
  o.n_threads = 2;
  o.weight_budget = weight_budget;
  return load_model(path, o);
}

class ScratchFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(ScratchFixture, EstimateCoversWhatAPrefillAllocates) {
  auto m = load_model(kGguf + GetParam(), LoadOptions{2});
  const int n_ctx = 160, n = 150;
  const std::vector<int32_t> prompt = long_prompt(*m, n);
  Session s(*m, n_ctx, n);
  const uint64_t before = heap_in_use();
  s.feed(prompt, true);  // all logits: the estimate counts a logits row per token
  const uint64_t grown = heap_in_use() - before;
  const uint64_t est = scratch_bytes_estimate(m->config(), n_ctx, n) - kScratchFixedBytes +
                       kv_bytes_estimate(m->config(), n_ctx);
  std::printf("[ scratch  ] %s: %d tokens grew the heap %.3f MiB, estimate (KV + scratch - fixed) %.3f MiB\n",
              GetParam(), n, grown / 1048576.0, est / 1048576.0);
  EXPECT_LE(grown, est) << GetParam();
  EXPECT_GE(grown * 4, est) << GetParam() << ": the estimate is far above what is used";
}

// `run` keeps one logits row (LoadOptions::n_logits = 1): a fresh model's prefill
// without all logits fits that estimate, which is smaller by the other rows.
TEST_P(ScratchFixture, OneLogitsRowEstimateCoversAPlainPrefill) {
  auto m = load_model(kGguf + GetParam(), LoadOptions{2});
  const int n_ctx = 160, n = 150;
  const ModelConfig& c = m->config();
  EXPECT_EQ(scratch_bytes_estimate(c, n_ctx, n) - scratch_bytes_estimate(c, n_ctx, n, MlaForm::Auto, 1),
            (uint64_t)(n - 1) * c.n_vocab * sizeof(float));
  Session s(*m, n_ctx, n);
  const uint64_t before = heap_in_use();
  s.feed(long_prompt(*m, n));
  const uint64_t grown = heap_in_use() - before;
  EXPECT_LE(grown, scratch_bytes_estimate(c, n_ctx, n, MlaForm::Auto, 1) - kScratchFixedBytes + kv_bytes_estimate(c, n_ctx))
      << GetParam();
}

// Gated DeltaNet hybrids (HF fixtures): the estimate covers a prefill only with
// their linear-attention buffers (gdn_scratch_bytes) added.
TEST(ScratchGdn, EstimateWithLinearAttentionBuffersCoversAPrefill) {
  for (const char* name : {"qwen3next-tiny", "qwen35moe-tiny"}) {
    auto m = load_model(std::string(SPOOL_SHARED_DIR) + "/fixtures/" + name, LoadOptions{2});
    const int n_ctx = 160, n = 150;
    const std::vector<int32_t> prompt = long_prompt(*m, n);
    Session s(*m, n_ctx, n);
    const uint64_t before = heap_in_use();
    s.feed(prompt, true);
    const uint64_t grown = heap_in_use() - before;
    const uint64_t gdn = gdn_scratch_bytes(m->file(), m->config(), n);
    const uint64_t est = scratch_bytes_estimate(m->config(), n_ctx, n) - kScratchFixedBytes +
                         kv_bytes_estimate(m->config(), n_ctx) + gdn;
    std::printf("[ scratch  ] %s: %d tokens grew the heap %.3f MiB, estimate %.3f MiB (linear attention %.3f MiB)\n",
                name, n, grown / 1048576.0, est / 1048576.0, gdn / 1048576.0);
    EXPECT_GT(gdn, 0u);
    EXPECT_LE(grown, est) << name;
    EXPECT_GE(grown * 4, est) << name << ": the estimate is far above what is used";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ScratchFixture,
                         ::testing::Values("deepseek3-tiny.f32.gguf", "deepseek3-tiny.q8_0.gguf",
                                           "mixtral-tiny.f32.gguf", "qwen2-tiny.f32.gguf", "kimi-k3-tiny.f32.gguf"));

// In batch-invariant mode every matmul row depends on that row only, so a
// 70-token pass (MLA in chunks 32 + 32 + 6, the dense FFN in 64 + 6) must give
// exactly the logits of passes of 7 tokens (one chunk each).
TEST(StreamingScratch, ChunkedMlaAndDenseFfnEqualShortBatches) {
  for (const char* file : {"deepseek3-tiny.f32.gguf", "deepseek3-tiny.q8_0.gguf"}) {
    set_matmul_batch_invariant(true);
    auto m = load_model(kGguf + file, LoadOptions{2});
    const std::vector<int32_t> prompt = long_prompt(*m, 70);
    Session one(*m, 128, 70), short_passes(*m, 128, 7), odd(*m, 128, 33);  // 33 = 32 + 1 left: 31 + 2
    const std::vector<float> a = one.feed(prompt, true);
    EXPECT_TRUE(bitwise_equal(a, short_passes.feed(prompt, true))) << file;
    EXPECT_TRUE(bitwise_equal(a, odd.feed(prompt, true))) << file;
    set_matmul_batch_invariant(false);
  }
}

TEST(StreamingScratch, StreamingEqualsResidentWithTheWholePromptInOnePass) {
  const std::string path = kGguf + "deepseek3-tiny.f32.gguf";
  auto resident = load_model(path, LoadOptions{2});
  uint64_t min_budget = 0;
  {
    auto probe = load_streaming(path, 1ull << 30);
    min_budget = static_cast<StreamingStore&>(probe->weights()).minimum_budget();
  }
  auto streaming = load_streaming(path, min_budget);
  auto run = [](Model& m) {
    Session s(m, 128, 100);
    std::vector<float> out = s.feed(long_prompt(m, 90), true);
    const int V = m.config().n_vocab;
    for (int k = 0; k < 4; ++k) {
      const float* l = out.data() + out.size() - V;
      const std::vector<float>& step = s.feed({(int32_t)(std::max_element(l, l + V) - l)});
      out.insert(out.end(), step.begin(), step.end());
    }
    return out;
  };
  EXPECT_TRUE(bitwise_equal(run(*resident), run(*streaming)));
  EXPECT_GT(streaming->weights().stats_snapshot().evictions, 0u);
}

// From the smallest budget up to one that holds everything: the plan stays
// inside the budget and never keeps fewer bytes resident with more room.
TEST(StreamingScratch, ResidencyGrowsWithTheBudgetAndStaysInside) {
  for (const char* file : {"deepseek3-tiny.q8_0.gguf", "qwen2-tiny.f32.gguf"}) {
    const std::string path = kGguf + file;
    uint64_t lo = 0;
    {
      auto probe = load_streaming(path, 1ull << 30);
      lo = static_cast<StreamingStore&>(probe->weights()).minimum_budget();
    }
    const uint64_t hi = fs::file_size(path) * 2;
    uint64_t last_resident = 0;
    for (int k = 0; k <= 12; ++k) {
      const uint64_t budget = lo + (hi - lo) * k / 12;
      auto m = load_streaming(path, budget);
      const StoreStats st = m->weights().stats_snapshot();
      EXPECT_LE(st.arena_bytes + st.resident_bytes, budget) << file << " " << budget;
      EXPECT_GE(st.resident_bytes, last_resident) << file << " " << budget;
      last_resident = st.resident_bytes;
    }
  }
}

// The prompt step's bytes read (stats JSON) for a prompt of 60 tokens; -1 when the run fails.
int64_t prompt_bytes(const std::string& model, const std::string& budget, const std::string& extra,
                      const fs::path& json, std::string* err) {
  std::string ids;
  for (int i = 0; i < 60; ++i) ids += (i ? "," : "") + std::to_string((i * 37 + 11) % 100);
  int status = -1;
  *err = run_stdout(std::string(SPOOL_BIN) + " run -m " + model + " -t 2 -c 128 --prompt-ids " + ids +
                        " -n 1 --temp 0 --mem-budget " + budget + " " + extra + " --stats-json " + json.string() +
                        " 2>&1 >/dev/null",
                    &status);
  if (status != 0) return -1;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  return j["per_token"][0]["bytes_read"].get<int64_t>();
}

TEST(StreamingScratch, RunPrefillsThePromptInOnePassUnderABudget) {
  char tmpl[] = "/tmp/spool_scratch_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const std::string model = kGguf + "deepseek3-tiny.q8_0.gguf";
  // The smallest budget the CLI accepts (its error says), plus 1/8 for the batch's scratch.
  std::string err;
  EXPECT_EQ(prompt_bytes(model, "1M", "", dir / "a.json", &err), -1);
  const size_t at = err.find("give at least ");
  ASSERT_NE(at, std::string::npos) << err;
  const uint64_t need_mib = std::stoull(err.substr(at + 14));
  const std::string budget = std::to_string(need_mib + need_mib / 8) + "M";
  ASSERT_GE(prompt_bytes(model, budget, "", dir / "b.json", &err), 0) << err;
  const size_t per = err.find(" tokens per pass)");
  ASSERT_NE(per, std::string::npos) << err;
  const int n_batch = std::stoi(err.substr(err.rfind('(', per) + 1));
  EXPECT_GE(n_batch, 60) << err;  // the whole prompt in one pass
  EXPECT_LE(n_batch, 128) << err;  // at most -c
  fs::remove_all(dir);
}

// Under the smallest budget (every expert slot evicted as a prompt goes
// through), one pass of 60 tokens reads each streamed weight at most once;
// ten passes of 6 re-read them.
TEST(StreamingScratch, OnePassReadsEachStreamedWeightAtMostOnce) {
  const std::string path = kGguf + "deepseek3-tiny.q8_0.gguf";
  uint64_t min_budget = 0;
  {
    auto probe = load_streaming(path, 1ull << 30);
    min_budget = static_cast<StreamingStore&>(probe->weights()).minimum_budget();
  }
  auto prompt_read = [&](int n_batch) {
    auto m = load_streaming(path, min_budget);
    const uint64_t before = m->weights().stats_snapshot().bytes_read;
    Session s(*m, 128, n_batch);
    s.feed(long_prompt(*m, 60));
    return m->weights().stats_snapshot().bytes_read - before;
  };
  const uint64_t one = prompt_read(60), ten = prompt_read(6);
  EXPECT_GT(one, 0u);
  EXPECT_LE(one, fs::file_size(path));
  EXPECT_LT(one * 2, ten);
}

// One pass driven on the store itself, the way a model makes it: every
// streamed unit used once, layer after layer. A layer's tensors go in the
// reverse of file order (the store reads a layer ahead in file order), up to
// three pinned at once (the most the models pin); then its experts one at a
// time, gate and up pinned together, then down. With `hints` the store hears
// what a model tells it (will_use_layer, prefetch of the experts), and
// `pause_ms` before each layer and each layer's experts lets the I/O threads
// land every read-ahead before compute asks (read-aheads fill the slots).
// Returns the bytes the pass read.
uint64_t simulated_pass_bytes(const Manifest& manifest, uint64_t budget, const std::string& policy, bool hints,
                              int pause_ms, StoreStats* stats = nullptr) {
  StreamingOptions o;
  o.policy = policy;
  std::unique_ptr<StreamingStore> store = make_streaming_store(manifest, o);
  store->set_min_expert_slots(3);  // the fixture's experts per token + 1, as load_model sets it
  store->start(budget, nullptr);   // nothing to pack: no tensor is declared a matmul weight
  const uint64_t before = store->stats_snapshot().bytes_read;
  // Layer -> tensors in file order; layer -> expert -> its slices. Layer -1: outside the layers.
  std::map<int, std::vector<const TensorEntry*>> tensors;
  std::map<int, std::map<int, std::vector<const TensorEntry*>>> experts;
  for (const TensorEntry& t : store->manifest().tensors) {
    const int l = t.name.starts_with("blk.") ? std::stoi(t.name.substr(4)) : -1;
    if (t.expert >= 0) experts[l][t.expert].push_back(&t);
    else tensors[l].push_back(&t);
  }
  const int n_layer = tensors.rbegin()->first + 1;
  auto pause = [&] { if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms)); };
  auto use_tensors = [&](int l) {
    const std::vector<const TensorEntry*>& ts = tensors[l];
    for (size_t i = ts.size(); i > 0;) {  // reverse file order, two pinned at once (attention; decode)
      std::vector<WeightRef> held;
      for (int k = 0; k < 2 && i > 0; ++k) held.push_back(store->acquire(*ts[--i]));
    }
  };
  if (hints) store->will_use_layer(0);
  for (int l = 0; l < n_layer; ++l) {
    if (hints) store->will_use_layer(l + 1);
    pause();
    use_tensors(l);
    if (!experts.count(l)) continue;
    std::vector<const TensorEntry*> all;
    for (const auto& [e, slices] : experts[l]) all.insert(all.end(), slices.begin(), slices.end());
    if (hints) store->prefetch(all);
    pause();
    for (auto& [e, slices] : experts[l]) {
      EXPECT_EQ(slices.size(), 3u);
      if (slices.size() != 3) continue;
      // gate and up, then down, as moe_forward pins them
      std::stable_partition(slices.begin(), slices.end(),
                            [](const TensorEntry* t) { return t->name.find("_down_") == std::string::npos; });
      {
        WeightRef gate = store->acquire(*slices[0]), up = store->acquire(*slices[1]);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // between an expert's pins
      WeightRef down = store->acquire(*slices[2]);
    }
  }
  use_tensors(-1);
  const StoreStats st = store->stats_snapshot();
  if (stats) *stats = st;
  return st.bytes_read - before;
}

// Read-ahead changes when a unit is read, never how often: a pass that uses
// each streamed unit once reads exactly the bytes it reads without any hint,
// under the smallest budget (tensors and experts stream, three slots each) and
// with every tensor resident and six expert slots, for each eviction policy,
// both when the I/O threads land every read-ahead before compute asks and
// when compute races them.
TEST(StreamingScratch, ReadAheadNeverMakesAPassReadAUnitTwice) {
  const std::string path = kGguf + "deepseek3-tiny.q8_0.gguf";
  gguf::File f = gguf::open(path);
  split_expert_tensors(f.manifest);
  uint64_t min_budget = 0, roomy = 0;
  {
    std::unique_ptr<StreamingStore> probe = make_streaming_store(f.manifest, StreamingOptions{});
    probe->set_min_expert_slots(3);
    min_budget = probe->minimum_budget();
    probe->start(1ull << 30, nullptr);
    const StoreStats st = probe->stats_snapshot();
    roomy = st.resident_bytes + 6 * st.expert_slot_bytes;
  }
  for (const uint64_t budget : {min_budget, roomy}) {
    for (const char* policy : {"lru", "lfu", "lru2"}) {
      const uint64_t plain = simulated_pass_bytes(f.manifest, budget, policy, false, 0);
      EXPECT_GT(plain, 0u);
      for (const int pause_ms : {20, 0}) {
        StoreStats st;
        EXPECT_EQ(simulated_pass_bytes(f.manifest, budget, policy, true, pause_ms, &st), plain)
            << st.tensor_slots << " tensor slots, " << st.expert_slots << " expert slots, " << policy << ", pause "
            << pause_ms << " ms";
        // Some read-ahead happened: not every queued unit was dropped (no room, or looked up first).
        if (pause_ms > 0) {
          EXPECT_GT(st.prefetch_issued, st.prefetch_dropped) << st.expert_slots << " expert slots, " << policy;
        }
      }
    }
  }
}

}  // namespace
