// The CLI binary as users meet it: bad arguments and bad files give a
// non-zero exit and one clear line on stderr (GGUF v1, a truncated file naming
// a tensor, a missing file); inspect, synth and bench work end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

using spool::test::slurp;

namespace fs = std::filesystem;
const std::string kShared = SPOOL_SHARED_DIR;
const std::string kBin = SPOOL_BIN;

std::string temp_dir() {
  static spool::test::ScratchDir dir("spool-cli-test");
  return dir.path;
}

struct Result {
  int status = -1;  // exit code
  std::string out, err;
  int err_lines() const {
    int n = 0;
    for (char c : err) n += c == '\n';
    return n;
  }
};

// Runs `spool ARGS` with stdout and stderr captured separately.
Result spool(const std::string& args) {
  const std::string out = temp_dir() + "/stdout", err = temp_dir() + "/stderr";
  const int rc = std::system((kBin + " " + args + " >" + out + " 2>" + err).c_str());
  Result r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

const std::string& stories() {
  static const std::string p = kShared + "/models/stories260K.gguf";
  return p;
}

TEST(Cli, BinaryAndDataExist) {
  ASSERT_TRUE(fs::exists(SPOOL_BIN_FILE)) << SPOOL_BIN_FILE << " is missing: build the spool target";
  ASSERT_TRUE(fs::exists(stories())) << stories();
  ASSERT_TRUE(fs::exists(kShared + "/models/tinyllamas-stories-260k-f32.gguf"));
}

TEST(Cli, BadArgumentsFailWithAShortMessage) {
  for (const char* args : {"bench --no-such-flag", "inspect --bogus", "run -m", "synth --preset tiny", "frobnicate"}) {
    SCOPED_TRACE(args);
    const Result r = spool(args);
    EXPECT_NE(r.status, 0);
    EXPECT_FALSE(r.err.empty());
    EXPECT_LE(r.err_lines(), 2) << r.err;  // CLI11: the problem, then "Run with --help"
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(Cli, InvalidValuesGiveOneErrorLine) {
  const std::string bad_synth = "synth --preset tiny --type Q9_9 -o " + temp_dir() + "/x.gguf";
  for (const std::string& args : {"bench -m " + stories() + " -r 0", "bench -m " + stories() + " -p 0 -n 0",
                                  bad_synth, "synth --preset nope -o " + temp_dir() + "/x.gguf"}) {
    SCOPED_TRACE(args);
    const Result r = spool(args);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err_lines(), 1) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  }
  EXPECT_NE(spool(bad_synth).err.find("Q9_9"), std::string::npos);
}

TEST(Cli, RefusesGgufVersion1) {
  const Result r = spool("run -m " + kShared + "/models/tinyllamas-stories-260k-f32.gguf -p hi -n 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("version 1"), std::string::npos) << r.err;
}

TEST(Cli, RefusesTruncatedFileNamingATensor) {
  std::string data = slurp(stories());
  ASSERT_GT(data.size(), 100000u);
  const std::string path = temp_dir() + "/truncated.gguf";
  std::ofstream(path, std::ios::binary) << data.substr(0, data.size() - 50000);
  for (const std::string& cmd : {"run -m " + path + " -p hi -n 1", "inspect " + path}) {
    SCOPED_TRACE(cmd);
    const Result r = spool(cmd);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err_lines(), 1) << r.err;
    EXPECT_NE(r.err.find("tensor '"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
  }
}

TEST(Cli, NonexistentFileIsAClearError) {
  const Result r = spool("run -m " + temp_dir() + "/does-not-exist.gguf -p hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_NE(r.err.find("does-not-exist.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
}

TEST(Cli, InspectStories260K) {
  const Result r = spool("inspect --tensors " + stories());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("architecture:  llama"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("llama.embedding_length"), std::string::npos);
  EXPECT_NE(r.out.find("n_vocab 512"), std::string::npos);
  EXPECT_NE(r.out.find("bos 1 '<s>'"), std::string::npos);
  // 5 layers x 4 KV heads x (8 + 8) x 4 bytes.
  EXPECT_NE(r.out.find("1280 bytes/token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors:       48,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.4.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.out.find("[172, 64]"), std::string::npos) << r.out;
}

TEST(Cli, SynthInspectBenchEndToEnd) {
  const std::string model = temp_dir() + "/tiny-q4km.gguf";
  Result r = spool("synth --preset tiny --type Q4_K_M --seed 3 -t 2 --verify -o " + model + " --vocab-from " + kShared +
                   "/models/llama-2-tiny-random.gguf");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("finite logits"), std::string::npos) << r.err;

  r = spool("inspect " + model);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Q4_K - Medium"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Q6_K"), std::string::npos) << r.out;
  // 2 layers x 4 KV heads x (32 + 32) x 4 bytes.
  EXPECT_NE(r.out.find("2048 bytes/token"), std::string::npos) << r.out;

  r = spool("bench -m " + model + " -t 2 -p 16 -n 4 -r 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["test"], "pp16");
  EXPECT_EQ(j[1]["test"], "tg4");
  EXPECT_EQ(j[1]["n_tokens"], 4);
  EXPECT_EQ(j[0]["threads"], 2);
  EXPECT_EQ(j[0]["type"], "Q4_K - Medium");
  EXPECT_EQ(j[0]["samples"].size(), 2u);
  EXPECT_GT(j[0]["tok_s_median"].get<double>(), 0.0);

  r = spool("bench -m " + model + " -t 1 -p 8 -n 2 -r 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("pp8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tg2"), std::string::npos) << r.out;
}

// `spool run --spec`: the text is the same with drafts as without, on a dense
// model (rejected positions forgotten) and on hybrid ones (the recurrent state
// goes back to a checkpoint and the kept tokens are folded in again). Drafts
// come from the plain run's text with every fourth word replaced, so some are
// accepted and some rejected, which --stats-json must show.
TEST(Cli, RunWithDraftsGivesTheSameText) {
  const std::string prompt = "\"Once upon a time, there was a little girl named Lily. She loved\"";
  for (const std::string model : {stories(), kShared + "/fixtures/kimi-linear-tiny",
                                  kShared + "/fixtures/gguf/kimi-k3-tiny.f32.gguf"}) {
    SCOPED_TRACE(model);
    const std::string base = "run -m " + model + " -p " + prompt + " -n 80 --temp 0 ";
    const Result plain = spool(base + "--spec off");
    ASSERT_EQ(plain.status, 0) << plain.err;
    ASSERT_GT(plain.out.size(), 40u);
    std::istringstream words(plain.out);
    std::string w, edited;
    for (int i = 1; words >> w; ++i) edited += (i % 4 == 0 ? std::string("zebra") : w) + " ";
    const std::string ctx = temp_dir() + "/spec-context.txt", stats = temp_dir() + "/spec-stats.json";
    std::ofstream(ctx) << edited;
    const Result drafted = spool(base + "--spec on --spec-context " + ctx + " --stats-json " + stats);
    ASSERT_EQ(drafted.status, 0) << drafted.err;
    EXPECT_EQ(drafted.out, plain.out);
    const auto j = nlohmann::json::parse(slurp(stats));
    EXPECT_EQ(j["spec"]["mode"], "on");
    EXPECT_GT(j["spec"]["accepted_tokens"].get<int>(), 0);
    EXPECT_LT(j["spec"]["accepted_tokens"].get<int>(), j["spec"]["drafted_tokens"].get<int>());
  }
}

// -md: a draft model (here the model itself: every draft accepted) leaves the
// text unchanged; one of another vocabulary is refused by name.
TEST(Cli, RunWithADraftModel) {
  const std::string base = "run -m " + stories() + " -p \"Once upon a time, there was\" -n 80 --temp 0 ";
  const Result plain = spool(base + "--spec off");
  ASSERT_EQ(plain.status, 0) << plain.err;
  const std::string stats = temp_dir() + "/md-stats.json";
  const Result drafted = spool(base + "--spec on -md " + stories() + " --stats-json " + stats);
  ASSERT_EQ(drafted.status, 0) << drafted.err;
  EXPECT_EQ(drafted.out, plain.out);
  const auto j = nlohmann::json::parse(slurp(stats));
  EXPECT_TRUE(j["spec"]["draft_model"].get<bool>());
  EXPECT_GT(j["spec"]["model_drafted_tokens"].get<int>(), 40);
  EXPECT_EQ(j["spec"]["model_accepted_tokens"], j["spec"]["model_drafted_tokens"]);
  const Result refused = spool(base + "--model-draft " + kShared + "/fixtures/gguf/qwen2-tiny.q8_0.gguf");
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.err.find("vocabulary"), std::string::npos) << refused.err;
}

}  // namespace

