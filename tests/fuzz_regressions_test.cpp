// Replays every input kept under tests/fuzz_regressions/<target>/ (crashes,
// hangs and sanitizer reports the fuzzers found, each fixed) through the same
// entry points the libFuzzer binaries call (fuzz/fuzz_targets.h), so the
// normal suite, and its sanitizer builds, catch a regression. Also checks
// that each target has its folder, so a renamed target cannot silently skip.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz_targets.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRegressions = fs::path(SPOOL_SOURCE_DIR) / "tests" / "fuzz_regressions";

std::string slurp_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class FuzzRegressions : public ::testing::TestWithParam<spool::fuzz::Target> {
 protected:
  void SetUp() override { ::setenv("SPOOL_FUZZ_SHARED", SPOOL_SHARED_DIR, 0); }
};

TEST_P(FuzzRegressions, ReplaysEveryKeptInput) {
  const spool::fuzz::Target t = GetParam();
  const fs::path dir = kRegressions / t.name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing (every fuzz target keeps its regression folder)";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename().string().starts_with(".") ||
        e.path().filename() == "README.md")
      continue;
    const std::string bytes = slurp_bytes(e.path());
    SCOPED_TRACE(e.path().string());
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(t.entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
    // A fixed hang must stay fixed: each input ends well within a second (sanitizer builds are slower).
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 10.0) << "input took " << s << " s";
    ++n;
  }
  RecordProperty("inputs", n);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, FuzzRegressions, ::testing::ValuesIn(spool::fuzz::targets()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
