// End-to-end generation through the CLI binary: greedy text on stories260K
// must equal what llama.cpp prints for the same model, prompt and length.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "test_util.h"

namespace {

using namespace spool::test;

const std::string kShared = SPOOL_SHARED_DIR;
const std::string kBin = SPOOL_BIN;

TEST(Generation, Stories260KGreedyMatchesLlamaCpp) {
  int status = -1;
  const std::string out = run_stdout(kBin + " run -m " + kShared +
                                         "/models/stories260K.gguf -p \"Once upon a time\" -n 64 --temp 0 -t 2 2>/dev/null",
                                     &status);
  EXPECT_EQ(status, 0);
  // llama.cpp's llama-completion prints exactly these 175 bytes (64 tokens).
  const std::string want =
      ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. "
      "She wanted to play with it, but it was too high.\nLily's mom said";
  EXPECT_EQ(out, want);
}

TEST(Generation, OutputIdsAndPromptIds) {
  int status = -1;
  const std::string ids = run_stdout(kBin + " run -m " + kShared +
                                         "/models/stories260K.gguf --prompt-ids 1,403,407 -n 5 --temp 0 --output-ids 2>/dev/null",
                                     &status);
  EXPECT_EQ(status, 0);
  int commas = 0;
  for (char c : ids) commas += c == ',';
  EXPECT_EQ(commas, 4) << ids;
  EXPECT_EQ(ids.back(), '\n');
}

TEST(Generation, StopStringEndsOutput) {
  int status = -1;
  const std::string out = run_stdout(kBin + " run -m " + kShared +
                                         "/models/stories260K.gguf -p \"Once upon a time\" -n 64 --temp 0 --stop Lily 2>/dev/null",
                                     &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out, ", there was a little girl named ");
}

}  // namespace

namespace {

// llama.cpp b10470's llama-perplexity on the same model, text and context:
//   llama-perplexity -m stories260K.gguf -f tests/data/tinystories-style.txt -c 128 -t 2
//   -> Final estimate: PPL = 4.4161 (55 chunks)
TEST(Generation, Stories260KPerplexityMatchesLlamaCpp) {
  int status = -1;
  const std::string out = run_stdout(kBin + " perplexity -m " + kShared + "/models/stories260K.gguf -f " +
                                         SPOOL_SOURCE_DIR + "/tests/data/tinystories-style.txt -c 128 -t 2 2>/dev/null",
                                     &status);
  EXPECT_EQ(status, 0);
  const size_t at = out.rfind("PPL: ");
  ASSERT_NE(at, std::string::npos) << out;
  const double ppl = std::stod(out.substr(at + 5));
  EXPECT_NEAR(ppl, 4.4161, 4.4161 * 0.005) << out;
}

}  // namespace
