// The KV disk tier (runtime/kv_disk.h): blocks written by one engine are read
// back by a fresh one (a restart) with the same greedy tokens and logprobs as
// computing the prompt; damaged, truncated and foreign files are deleted and
// recomputed with the output unchanged; a disk that refuses writes (file size
// limit: the same write error as a full disk) loses nothing but the tier; the
// tier keeps within its byte budget, least recently used out first; a
// Session (`spool run`) reads the engine's blocks and saves its own.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/kv_paged.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/kv_disk.h"
#include "runtime/prefix_cache.h"
#include "runtime/session.h"
#include "test_util.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;

struct TempDir {
  std::string path;
  TempDir() {
    path = (fs::temp_directory_path() / "spool-kvdisk-XXXXXX").string();
    if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int cached_tokens = 0;
};

Outcome run_one(Engine& e, const std::vector<int32_t>& prompt, int n) {
  RequestParams p;
  p.prompt = prompt;
  p.max_tokens = n;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.top_logprobs = 0;
  auto out = std::make_shared<Outcome>();
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  e.submit(p, [out, done](const RequestEvent& ev) {
    out->tokens.insert(out->tokens.end(), ev.tokens.begin(), ev.tokens.end());
    for (const TokenLogprob& lp : ev.logprobs) out->logprobs.push_back(lp.logprob);
    if (ev.finished) {
      EXPECT_EQ(ev.reason, FinishReason::Length) << ev.error;
      out->cached_tokens = ev.cached_tokens;
      done->set_value();
    }
  });
  EXPECT_EQ(fut.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  return *out;
}

std::vector<int32_t> prompt_for(const Model& m, int len, int salt = 0) {
  const int V = m.config().n_vocab;
  std::vector<int32_t> p;
  for (int j = 0; j < len; ++j) p.push_back((int32_t)((7 + 13 * j + salt * 31 + j * j) % (V - 10) + 5));
  return p;
}

EngineOptions opts(const std::string& dir) {
  EngineOptions o;
  o.n_ctx = 256;
  o.max_batch_tokens = 24;  // the prompt is prefilled in several chunks
  o.block_size = 8;
  o.max_running = 2;
  if (!dir.empty()) {
    o.kv_disk_dir = dir;
    o.kv_disk_bytes = 1ull << 30;
  }
  return o;
}

std::vector<std::string> block_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& sub : fs::directory_iterator(dir))
    for (const auto& e : fs::directory_iterator(sub.path()))
      if (e.path().extension() == ".kvb") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Logits that agree to F32 rounding, with the same greedy token.
void expect_close(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LT(worst, 1e-3f);
  EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(), std::max_element(b.begin(), b.end()) - b.begin());
}

const char* const kModels[] = {"/models/stories260K.gguf", "/fixtures/gguf/qwen2-tiny.q8_0.gguf",
                               "/fixtures/gguf/deepseek3-tiny.f32.gguf"};

}  // namespace

TEST(KvDisk, RestartLoadsThePrefixWithIdenticalOutput) {
  for (const char* path : kModels) {
    SCOPED_TRACE(path);
    auto model = load_model(kShared + path, LoadOptions{2});
    const std::vector<int32_t> prompt = prompt_for(*model, 75);
    const int n = 12;
    Outcome reference;
    {
      auto e = make_engine(*model, opts(""));
      reference = run_one(*e, prompt, n);
      EXPECT_FALSE(e->stats().kv_disk);
    }
    TempDir dir;
    {
      auto e = make_engine(*model, opts(dir.path));
      ASSERT_TRUE(e->stats().kv_disk);
      const Outcome first = run_one(*e, prompt, n);
      EXPECT_EQ(test::join(first.tokens), test::join(reference.tokens));
      EXPECT_EQ(first.cached_tokens, 0);
    }  // the engine's end writes what is queued
    // Prompt and generated tokens: (75 + 12 - 1) positions computed, 10 full blocks of 8.
    const std::vector<std::string> files = block_files(dir.path);
    EXPECT_EQ(files.size(), 10u);
    // Readable by the server's user only: KV holds the conversation.
    EXPECT_EQ(fs::status(dir.path).permissions() & fs::perms::all, fs::perms::owner_all);
    EXPECT_EQ(fs::status(fs::path(files.at(0)).parent_path()).permissions() & fs::perms::all, fs::perms::owner_all);
    EXPECT_EQ(fs::status(files.at(0)).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
    {
      auto e = make_engine(*model, opts(dir.path));  // a restart: nothing in memory
      const Outcome again = run_one(*e, prompt, n);
      EXPECT_EQ(test::join(again.tokens), test::join(reference.tokens));
      EXPECT_EQ(again.logprobs, reference.logprobs);  // bit-identical to computing the prompt
      EXPECT_EQ(again.cached_tokens, 72);             // 9 blocks before the last prompt token
      const EngineStats s = e->stats();
      EXPECT_EQ(s.kv_disk_hit_tokens, 72u);
      EXPECT_EQ(s.kv_disk_stats.hits, 9u);
      EXPECT_EQ(s.kv_disk_stats.rejected, 0u);
      // A longer prompt with the same start (the conversation's next turn) reuses the same blocks.
      std::vector<int32_t> next = prompt;
      next.insert(next.end(), again.tokens.begin(), again.tokens.end());
      for (int32_t t : prompt_for(*model, 20, 3)) next.push_back(t);
      const Outcome turn = run_one(*e, next, 4);
      EXPECT_GE(turn.cached_tokens, 80);
    }
  }
}

TEST(KvDisk, DamagedTruncatedAndForeignFilesAreRecomputed) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  // Another model with the same tensor table: a copy whose last tensor starts with another byte.
  TempDir other_dir;
  const std::string other_path = other_dir.path + "/other.gguf";
  fs::copy_file(kShared + "/models/stories260K.gguf", other_path);
  {
    const gguf::File f = open_model_file(other_path);
    uint64_t last = 0;
    for (const TensorEntry& t : f.manifest.tensors) last = std::max(last, t.offset);
    std::fstream io(other_path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg((std::streamoff)last);
    char c = 0;
    io.read(&c, 1);
    c ^= 0x01;
    io.seekp((std::streamoff)last);
    io.write(&c, 1);
  }
  auto other = load_model(other_path, LoadOptions{2});
  ASSERT_NE(kv_fingerprint(*model, model->kv_shape(), 8), kv_fingerprint(*other, other->kv_shape(), 8));
  const std::vector<int32_t> prompt = prompt_for(*model, 75);
  const int n = 8;
  Outcome reference;
  {
    auto e = make_engine(*model, opts(""));
    reference = run_one(*e, prompt, n);
  }
  TempDir dir;
  {
    auto e = make_engine(*model, opts(dir.path));
    run_one(*e, prompt, n);
  }
  {
    auto e = make_engine(*other, opts(dir.path));  // the other model's blocks, same token keys
    run_one(*e, prompt, n);
  }
  // Two fingerprint directories now, each with the blocks of the same keys.
  std::vector<fs::path> dirs;
  for (const auto& sub : fs::directory_iterator(dir.path)) dirs.push_back(sub.path());
  ASSERT_EQ(dirs.size(), 2u);
  KvDiskOptions ko;
  ko.dir = dir.path;
  ko.max_bytes = 1ull << 30;
  ko.block_size = 8;
  ko.block_bytes = PagedKvCache::block_bytes(model->kv_shape(), 8);
  ko.fingerprint = kv_fingerprint(*model, model->kv_shape(), 8);
  std::string mine;
  {
    KvDiskTier probe(ko);
    mine = fs::path(probe.path_of(1)).parent_path().string();
  }
  const fs::path theirs = dirs[0].string() == mine ? dirs[1] : dirs[0];
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(mine)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 9u);
  // The keys: the blocks of the prompt in order.
  PagedKvCache kv(model->kv_shape(), 8, 4, 256, 1);
  PrefixCache pc(kv);
  const std::vector<uint64_t> keys = pc.keys_of(prompt);
  KvDiskTier names(ko);
  // Block 3: one flipped payload byte. Block 5: cut short. Block 6: the other model's file under its name.
  {
    std::fstream f(names.path_of(keys[3]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    char c;
    f.read(&c, 1);
    f.seekp(-100, std::ios::end);
    c ^= 0x10;
    f.write(&c, 1);
  }
  fs::resize_file(names.path_of(keys[5]), fs::file_size(names.path_of(keys[5])) - 17);
  const std::string foreign = (theirs / fs::path(names.path_of(keys[6])).filename()).string();
  ASSERT_TRUE(fs::exists(foreign));
  fs::copy_file(foreign, names.path_of(keys[6]), fs::copy_options::overwrite_existing);

  // Each damaged block is found on its own: load block 0-2 + 3 (flipped), then again for 5 and 6.
  testing::internal::CaptureStderr();
  for (int round = 0; round < 3; ++round) {
    auto e = make_engine(*model, opts(dir.path));
    const Outcome out = run_one(*e, prompt, n);
    EXPECT_EQ(test::join(out.tokens), test::join(reference.tokens)) << "round " << round;
    EXPECT_EQ(out.logprobs, reference.logprobs) << "round " << round;
    const int expect_cached[3] = {24, 40, 48};  // stops before the bad block, which is then recomputed and saved again
    EXPECT_EQ(out.cached_tokens, expect_cached[round]) << "round " << round;
    EXPECT_EQ(e->stats().kv_disk_stats.rejected, 1u) << "round " << round;
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("payload checksum mismatch"), std::string::npos) << log;
  EXPECT_NE(log.find("truncated"), std::string::npos) << log;
  EXPECT_NE(log.find("another model"), std::string::npos) << log;
  // All three were rewritten from the recomputed blocks: a fourth run loads all nine.
  auto e = make_engine(*model, opts(dir.path));
  EXPECT_EQ(run_one(*e, prompt, n).cached_tokens, 72);
}

TEST(KvDisk, RefusedWritesLoseOnlyTheTier) {
  auto model = load_model(kShared + "/models/stories260K.gguf", LoadOptions{2});
  const std::vector<int32_t> prompt = prompt_for(*model, 60);
  Outcome reference;
  {
    auto e = make_engine(*model, opts(""));
    reference = run_one(*e, prompt, 8);
  }
  TempDir dir;
  // A file size limit below one block file: every write fails as on a full disk (EFBIG instead of ENOSPC,
  // the same error path).
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ign, &old);
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  rlimit small = saved;
  small.rlim_cur = 1000;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  testing::internal::CaptureStderr();
  Outcome out;
  KvDiskStats st;
  {
    auto e = make_engine(*model, opts(dir.path));
    out = run_one(*e, prompt, 8);
    const Outcome twice = run_one(*e, prompt, 8);  // from the pool (the in-memory tier still works)
    EXPECT_EQ(test::join(twice.tokens), test::join(reference.tokens));
    EXPECT_GT(twice.cached_tokens, 0);
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(test::join(out.tokens), test::join(reference.tokens));
  EXPECT_NE(log.find("cannot write"), std::string::npos) << log;
  EXPECT_TRUE(block_files(dir.path).empty());  // nothing half-written left behind
  for (const auto& sub : fs::directory_iterator(dir.path))
    for (const auto& f : fs::directory_iterator(sub.path())) ADD_FAILURE() << "left behind: " << f.path();
  {
    auto e = make_engine(*model, opts(dir.path));
    const Outcome again = run_one(*e, prompt, 8);
    EXPECT_EQ(again.cached_tokens, 0);
    EXPECT_EQ(test::join(again.tokens), test::join(reference.tokens));
    st = e->stats().kv_disk_stats;
  }
  EXPECT_EQ(st.rejected, 0u);
}

TEST(KvDisk, TierKeepsItsBudgetLeastRecentlyUsedOut) {
  TempDir dir;
  const int bs = 4;
  std::vector<uint8_t> k(1000), v(600);
  KvDiskOptions o;
  o.dir = dir.path;
  o.block_size = bs;
  o.block_bytes = k.size() + v.size();
  o.fingerprint = 42;
  const uint64_t file_bytes = 56 + 4 * bs + o.block_bytes;
  o.max_bytes = 3 * file_bytes;  // three files fit
  std::vector<int32_t> toks[5];
  for (int i = 0; i < 5; ++i) toks[i] = {i, i + 1, i + 2, i + 3};
  {
    KvDiskTier t(o);
    // (pauses: file times, which carry the order across restarts, are coarse)
    const auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
    for (int i = 0; i < 3; ++i) {
      std::fill(k.begin(), k.end(), (uint8_t)i);
      std::fill(v.begin(), v.end(), (uint8_t)(100 + i));
      t.store(100 + i, 7, toks[i], k, v);
      t.flush();
      pause();
    }
    // Block 100 is used (loaded): 101 becomes the least recently used.
    std::vector<uint8_t> k2(k.size()), v2(v.size());
    ASSERT_TRUE(t.load(100, 7, toks[0], k2, v2));
    pause();
    EXPECT_EQ(k2[10], 0);
    EXPECT_EQ(v2[10], 100);
    EXPECT_FALSE(t.load(100, 8, toks[0], k2, v2));        // another parent: not this block (file kept)
    EXPECT_FALSE(t.load(100, 7, toks[1], k2, v2));        // other tokens: not this block (file kept)
    EXPECT_TRUE(t.contains(100));
    t.store(103, 7, toks[3], k, v);
    t.flush();
    EXPECT_TRUE(t.contains(100));
    EXPECT_FALSE(t.contains(101));
    EXPECT_TRUE(t.contains(102));
    EXPECT_TRUE(t.contains(103));
    EXPECT_EQ(t.stats().evicted, 1u);
    EXPECT_EQ(t.stats().bytes, 3 * file_bytes);
  }
  // A restart keeps the order (file times): 102 goes next.
  {
    KvDiskTier t(o);
    EXPECT_EQ(t.stats().files, 3u);
    t.store(104, 7, toks[4], k, v);
    t.flush();
    EXPECT_FALSE(t.contains(102));
    EXPECT_TRUE(t.contains(100));
    EXPECT_TRUE(t.contains(103));
    EXPECT_EQ(t.stats().files, 3u);
    EXPECT_TRUE(t.contains(104));
  }
}

TEST(KvDisk, SessionReadsTheEnginesBlocksAndSavesItsOwn) {
  for (const char* path : kModels) {
    SCOPED_TRACE(path);
    auto model = load_model(kShared + path, LoadOptions{2});
    const std::vector<int32_t> prompt = prompt_for(*model, 75);
    // The reference computes everything (a tier over an empty directory: the same paged cache).
    TempDir empty;
    auto none = make_kv_disk_tier(*model, empty.path, 1ull << 30, 8);
    std::vector<float> reference;
    {
      Session s(*model, 256, 24);
      ASSERT_TRUE(s.set_kv_disk(none.get()));
      reference = s.feed(prompt);
      EXPECT_EQ(s.disk_hit_tokens(), 0);
    }
    TempDir dir;
    {
      auto e = make_engine(*model, opts(dir.path));
      run_one(*e, prompt, 2);
    }
    auto tier = make_kv_disk_tier(*model, dir.path, 1ull << 30, 8);
    Session s(*model, 256, 24);
    ASSERT_TRUE(s.set_kv_disk(tier.get()));
    // The engine computed these positions in other steps (prefill chunks, then decodes) than this session
    // would: as with the in-memory prefix cache, the logits agree to rounding, not bit for bit.
    expect_close(s.feed(prompt), reference);
    EXPECT_EQ(s.disk_hit_tokens(), 72);
    // The session's own blocks (its prompt and what it decodes) are saved for the next one.
    std::vector<int32_t> longer = prompt;
    for (int i = 0; i < 20; ++i) {
      longer.push_back(5 + i);
      s.feed({5 + i});
    }
    tier->flush();
    Session again(*model, 256, 24);
    ASSERT_TRUE(again.set_kv_disk(tier.get()));
    TempDir empty2;
    auto none2 = make_kv_disk_tier(*model, empty2.path, 1ull << 30, 8);
    Session plain(*model, 256, 24);
    ASSERT_TRUE(plain.set_kv_disk(none2.get()));
    expect_close(again.feed(longer), plain.feed(longer));
    EXPECT_EQ(again.disk_hit_tokens(), 88);  // (95 - 1) / 8 whole blocks
  }
}

TEST(KvDisk, HybridModelsSaveTheirStateSnapshotsToo) {
  const std::string fixtures = kShared + "/fixtures/";
  for (const char* name : {"qwen3next-tiny", "gguf/kimi-k3-tiny.f32.gguf"}) {
    SCOPED_TRACE(name);
    auto model = load_model(fixtures + name, LoadOptions{2});
    const std::vector<int32_t> prompt = prompt_for(*model, 150);
    EngineOptions base = opts("");
    base.max_batch_tokens = 128;  // (hybrids: prefill chunks end at multiples of 64)
    Outcome reference;
    {
      auto e = make_engine(*model, base);  // no snapshots: every prompt computed in full
      reference = run_one(*e, prompt, 8);
    }
    TempDir dir;
    EngineOptions o = opts(dir.path);
    o.max_batch_tokens = 128;
    o.state_snapshots = 2;
    o.snapshot_interval = 64;
    {
      auto e = make_engine(*model, o);
      ASSERT_TRUE(e->stats().kv_disk);
      EXPECT_EQ(test::join(run_one(*e, prompt, 8).tokens), test::join(reference.tokens));
    }
    size_t states = 0;
    for (const auto& sub : fs::directory_iterator(dir.path))
      for (const auto& f : fs::directory_iterator(sub.path())) states += f.path().extension() == ".kvs";
    EXPECT_EQ(states, 2u);  // at 64 and 128
    {
      auto e = make_engine(*model, o);  // a restart: neither blocks nor snapshots in memory
      const Outcome again = run_one(*e, prompt, 8);
      EXPECT_EQ(again.cached_tokens, 128);  // the last snapshot at or before the 144 positions of whole blocks
      EXPECT_EQ(test::join(again.tokens), test::join(reference.tokens));
      EXPECT_EQ(again.logprobs, reference.logprobs);
      EXPECT_EQ(e->stats().state_snapshot_hits, 1u);
    }
    // Without snapshots a hybrid model cannot use the tier.
    EngineOptions off = opts(dir.path);
    auto e = make_engine(*model, off);
    EXPECT_FALSE(e->stats().kv_disk);
  }
}
