// Helpers shared by the tests that compare spool with reference data: running
// the CLI, relative errors, full-sequence logits and greedy decoding.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "model/model.h"
#include "runtime/session.h"

namespace spool::test {

// A fresh directory under the system temp dir (prefix + random suffix), removed with the object.
struct ScratchDir {
  std::string path;
  explicit ScratchDir(const std::string& prefix) {
    path = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

// A whole file's bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<int32_t> to_i32(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// max |a - b| / max |b|, over row `row` of width n when n > 0, else over everything.
inline float rel_error(const std::vector<float>& a, const std::vector<float>& b, size_t n = 0, size_t row = 0) {
  const size_t lo = n ? row * n : 0, hi = n ? lo + n : b.size();
  float m = 0, r = 0;
  for (size_t i = lo; i < hi; ++i) {
    m = std::max(m, std::fabs(a[i] - b[i]));
    r = std::max(r, std::fabs(b[i]));
  }
  return m / r;
}

inline std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

// Runs a shell command; returns its stdout and stores its exit status.
inline std::string run_stdout(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *status = pclose(p);
  return out;
}

// Logits of every position of ids, evaluated as one sequence: [ids.size(), n_vocab].
inline std::vector<float> all_logits(Model& model, const std::vector<int32_t>& ids) {
  Session session(model, (int)ids.size());
  return session.feed(ids, true);
}

// n greedy tokens after prompt, decoded one at a time with the KV cache.
inline std::vector<int32_t> greedy(Model& model, const std::vector<int32_t>& prompt, size_t n) {
  const int V = model.config().n_vocab;
  Session s(model, (int)(prompt.size() + n + 1));
  const float* logits = s.feed(prompt).data();
  std::vector<int32_t> out;
  while (out.size() < n) {
    out.push_back((int32_t)(std::max_element(logits, logits + V) - logits));
    if (out.size() < n) logits = s.feed({out.back()}).data();
  }
  return out;
}

// Through the CLI: `spool logits` on the reference's input_ids stays within
// 1e-3 * max|ref| of its logits, and greedy `spool run --prompt-ids` prints
// exactly its greedy_ids.
inline void expect_cli_matches_reference(const std::string& bin, const std::string& model,
                                         const std::string& reference) {
  const auto ref = safetensors::open(reference);
  const std::string out =
      (std::filesystem::temp_directory_path() / ("spool_cli_ref_" + std::to_string(getpid()) + ".st")).string();
  int status = -1;
  run_stdout(bin + " logits -m " + model + " -t 2 --ids " + join(to_i32(ref.read_i64("input_ids"))) + " --out " +
                 out + " 2>&1",
             &status);
  ASSERT_EQ(status, 0) << model;
  EXPECT_LE(rel_error(safetensors::open(out).read_f32("logits"), ref.read_f32("logits")), 1e-3f) << model;
  std::filesystem::remove(out);
  const std::string ids = run_stdout(bin + " run -m " + model + " -t 2 --prompt-ids " +
                                         join(to_i32(ref.read_i64("prompt_ids"))) +
                                         " -n 16 --temp 0 --output-ids 2>/dev/null",
                                     &status);
  EXPECT_EQ(status, 0) << model;
  EXPECT_EQ(ids, join(to_i32(ref.read_i64("greedy_ids"))) + "\n") << model;
}

// A fixture model: the test's name, its path under fixtures/ and the fixture
// folder holding reference.safetensors.
struct FixtureCase {
  const char* name;
  const char* path;
  const char* fixture;
};

// An MLA model (deepseek2, kimi) in both MLA forms, absorbed and plain: its
// logits over the reference's input_ids within 1e-3 * max|ref|, greedy
// decoding of prompt_ids gives exactly greedy_ids, and the two forms (the same
// sums in a different order) within 1e-5 of each other. `check`, when given,
// runs on each loaded model first.
inline void expect_mla_forms_match_reference(const std::string& name, const std::string& model_path,
                                             const std::string& reference,
                                             const std::function<void(const Model&)>& check = {}) {
  const auto ref = safetensors::open(reference);
  const std::vector<float> want = ref.read_f32("logits");
  std::vector<float> per_form[2];
  for (MlaForm form : {MlaForm::Absorbed, MlaForm::Plain}) {
    LoadOptions o;
    o.n_threads = 2;
    o.mla_form = form;
    auto model = load_model(model_path, o);
    if (check) check(*model);
    std::vector<float>& got = per_form[form == MlaForm::Plain];
    got = all_logits(*model, to_i32(ref.read_i64("input_ids")));
    const float err = rel_error(got, want);
    const char* fname = form == MlaForm::Plain ? "plain" : "absorbed";
    std::printf("[ %s %s ] relative error %.3g\n", name.c_str(), fname, err);
    EXPECT_LE(err, 1e-3f) << name << " " << fname;
    ::testing::Test::RecordProperty(std::string("relative_error_") + fname, std::to_string(err));
    EXPECT_EQ(greedy(*model, to_i32(ref.read_i64("prompt_ids")), 16), to_i32(ref.read_i64("greedy_ids")))
        << name << " " << fname;
  }
  EXPECT_LE(rel_error(per_form[0], per_form[1]), 1e-5f) << name;
}

}  // namespace spool::test
