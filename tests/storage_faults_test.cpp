// Storage fault injection (SPOOL_STORAGE_FAULTS) and per-tensor checksums:
// a failed or corrupted streamed read fails the requests that needed it with
// an error naming the tensor and its bytes, frees their KV blocks, and the
// engine goes on serving the others.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>

#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "storage/fault_storage.h"
#include "storage/storage.h"
#include "test_util.h"
#include "weights/checksums.h"

namespace spool {
namespace {

namespace fs = std::filesystem;
const std::string kShared = SPOOL_SHARED_DIR;
const std::string kBin = SPOOL_BIN;

// Sets SPOOL_STORAGE_FAULTS for one scope.
struct FaultEnv {
  explicit FaultEnv(const std::string& spec) { setenv("SPOOL_STORAGE_FAULTS", spec.c_str(), 1); }
  ~FaultEnv() { unsetenv("SPOOL_STORAGE_FAULTS"); }
};

std::string write_pattern(const std::string& dir, size_t n) {
  const std::string path = dir + "/data.bin";
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = (uint8_t)(i * 7 + 3);
  std::ofstream(path, std::ios::binary).write((const char*)b.data(), (std::streamsize)n);
  return path;
}

TEST(StorageFaults, RulesParseAndBadRulesAreNamed) {
  auto r = parse_fault_rules("eio@10-20; delay=5@0-100#2 ;corrupt@7-8:x.gguf;short@3-4");
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].kind, FaultRule::Kind::Eio);
  EXPECT_EQ(r[0].begin, 10u);
  EXPECT_EQ(r[0].end, 20u);
  EXPECT_EQ(r[1].kind, FaultRule::Kind::Delay);
  EXPECT_EQ(r[1].delay_ms, 5);
  EXPECT_EQ(r[1].count, 2);
  EXPECT_EQ(r[2].file, "x.gguf");
  EXPECT_EQ(r[3].kind, FaultRule::Kind::Short);
  for (const char* bad : {"eio", "zap@1-2", "eio@5-5", "delay@1-2", "eio=3@1-2", "eio@a-9", "eio@1-2#x"}) {
    try {
      parse_fault_rules(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(StorageFaults, WrapperFailsDelaysAndCorruptsOnlyItsRange) {
  test::ScratchDir dir("spool-faults");
  const std::string path = write_pattern(dir.path, 1 << 16);
  StorageOptions so;
  so.direct = false;
  std::vector<uint8_t> buf(4096);
  {
    FaultEnv env("eio@8192-8193#1");
    auto s = open_storage(path, so);
    s->read_unaligned(0, 4096, buf.data());  // outside the range
    try {
      s->read_unaligned(4096, 8192, std::vector<uint8_t>(8192).data());
      ADD_FAILURE() << "no EIO";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("at offset 4096"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
    }
    s->read_unaligned(8192, 16, buf.data());  // #1: transient, the second read succeeds
    EXPECT_EQ(buf[0], (uint8_t)(8192 * 7 + 3));
  }
  {
    FaultEnv env("corrupt@100-102;delay=60@200-201");
    auto s = open_storage(path, so);
    s->read_unaligned(96, 8, buf.data());
    for (int i = 0; i < 8; ++i) {
      const uint8_t want = (uint8_t)((96 + i) * 7 + 3);
      if (96 + i == 100 || 96 + i == 101) EXPECT_NE(buf[i], want) << i;
      else EXPECT_EQ(buf[i], want) << i;
    }
    const auto t0 = std::chrono::steady_clock::now();
    s->read_unaligned(150, 100, buf.data());
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(55));
  }
  {
    FaultEnv env("eio@0-99999:other.gguf");  // another file's rule does not apply
    auto s = open_storage(path, so);
    s->read_unaligned(0, 16, buf.data());
  }
}

// A DeepSeek-V3-shaped MoE (7 MB) streamed under a small weight budget: its
// experts are read at request time, well past the 1 MiB header read.
const std::string kMoe = "/fixtures/gguf/deepseek3-fp8-tiny.f32.gguf";
std::unique_ptr<Model> load_streamed() {
  LoadOptions o;
  o.n_threads = 1;
  o.weight_budget = 3ull << 20;
  o.speculate = false;  // no expert read ahead: the request's own (demand) read meets the fault
  return load_model(kShared + kMoe, o);
}

struct Outcome {
  FinishReason reason = FinishReason::None;
  std::string error;
  std::vector<int32_t> tokens;
};

Outcome run_one(Engine& e, const std::vector<int32_t>& prompt, int n) {
  auto done = std::make_shared<std::promise<Outcome>>();
  auto out = std::make_shared<Outcome>();
  RequestParams p;
  p.prompt = prompt;
  p.max_tokens = n;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  e.submit(p, [done, out](const RequestEvent& ev) {
    out->tokens.insert(out->tokens.end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.finished) {
      out->reason = ev.reason;
      out->error = ev.error;
      done->set_value(*out);
    }
  });
  return done->get_future().get();
}

TEST(StorageFaults, FailedStreamedReadFailsOnlyThatRequestAndNamesTheTensor) {
  const std::vector<int32_t> prompt = {1, 200, 300, 400};
  std::vector<int32_t> reference;
  {
    auto m = load_streamed();
    ASSERT_TRUE(m->weights().streaming());
    auto e = make_engine(*m, EngineOptions{});
    reference = run_one(*e, prompt, 8).tokens;
    ASSERT_EQ(reference.size(), 8u);
  }
  // The streamed expert slice farthest into the file, found without faults.
  uint64_t begin = 0, end = 0;
  std::string name;
  {
    const gguf::File f = open_model_file(kShared + kMoe);
    for (const TensorEntry& t : f.manifest.tensors)
      if (t.expert >= 0 && t.offset > begin) begin = t.offset, end = t.offset + t.bytes, name = t.name;
    ASSERT_GT(begin, 1u << 20);
  }
  // Its middle byte: reads of its neighbours (aligned to 4 KiB) do not reach it.
  const uint64_t mid = begin + (end - begin) / 2;
  FaultEnv env("eio@" + std::to_string(mid) + "-" + std::to_string(mid + 1) + "#1");
  auto m = load_streamed();  // the load reads only the resident set, not this tensor
  EngineOptions eo;
  eo.n_ctx = 256;
  auto e = make_engine(*m, eo);
  // Every expert is needed sooner or later: the request runs until a token routes to this one.
  const Outcome bad = run_one(*e, prompt, 64);
  EXPECT_EQ(bad.reason, FinishReason::Error);
  EXPECT_NE(bad.error.find("tensor '" + name + "' bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ")"),
            std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("Input/output error"), std::string::npos) << bad.error;
  EXPECT_EQ(e->stats().kv_blocks_used, 0) << "the failed request's blocks are back";
  // The fault was transient: the same request now runs, with the same tokens as without faults.
  const Outcome good = run_one(*e, prompt, 8);
  EXPECT_EQ(good.reason, FinishReason::Length) << good.error;
  EXPECT_EQ(test::join(good.tokens), test::join(reference));
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST(StorageFaults, ChecksumsCatchCorruptedReads) {
  test::ScratchDir dir("spool-sums");
  const std::string model = dir.path + "/stories260K.gguf";
  fs::copy_file(kShared + "/models/stories260K.gguf", model);
  int st = 0;
  const std::string out = test::run_stdout(kBin + " checksum " + model + " 2>&1", &st);
  ASSERT_EQ(st, 0) << out;
  ASSERT_TRUE(fs::exists(model + ".sums")) << out;
  const std::string name = "blk.2.attn_q.weight";
  uint64_t begin = 0;
  {
    const gguf::File f = open_model_file(model);
    begin = f.manifest.require(name).offset;
  }
  // One corrupted byte in a streamed tensor: with the sidecar, the request fails naming it.
  const std::string run = kBin + " run -m " + model + " --mem-budget 64M -c 256 -p 'Once upon' -n 6 --temp 0 2>&1";
  const std::string spec = "SPOOL_STORAGE_FAULTS='corrupt@" + std::to_string(begin + 5) + "-" + std::to_string(begin + 6) + "' ";
  std::string r = test::run_stdout(spec + run, &st);
  EXPECT_NE(st, 0) << r;
  EXPECT_NE(r.find("checksum mismatch in tensor '" + name + "'"), std::string::npos) << r;
  // Without the sidecar nothing can tell: the run completes (on wrong weights).
  fs::remove(model + ".sums");
  r = test::run_stdout(spec + run, &st);
  EXPECT_EQ(st, 0) << r;
  // A sidecar for another file is refused by name.
  std::ofstream(model + ".sums") << R"({"format":"spool-checksums","algorithm":"crc32","files":[{"name":"x","size":1}],"tensors":{}})";
  r = test::run_stdout(run, &st);
  EXPECT_NE(st, 0) << r;
  EXPECT_NE(r.find("was made for a file of 1 bytes"), std::string::npos) << r;
}

}  // namespace
}  // namespace spool
