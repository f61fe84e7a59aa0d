// `spool bench`: llama-bench's two tests on a loaded model. ppN evaluates N
// random prompt tokens in one batch from an empty cache; tgN generates N tokens
// one at a time from an empty cache (random ids, as llama-bench feeds). Each
// test runs once to warm up, then -r times; we report the median tok/s and the
// standard deviation. Model loading is never timed.
// --verify K,...: the cost of a speculative verify step. After a prompt of
// -p tokens, steps of 1 + K rows with logits on every row are run -n times at
// the same positions (each one forgotten again), against steps of one row,
// both batch-invariant as the engine computes them; reported as steps/s and
// as the ratio of step times.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "runtime/session.h"
#include "synth/synth_quant_mix.h"
#include "stream_stats.h"

namespace spool::cli {
namespace {

struct BenchOptions {
  std::string model;
  int n_threads = 0, n_prompt = 128, n_gen = 64, repeats = 5;
  uint32_t seed = 1234;
  bool json = false;
  ModelFlags model_flags;
  std::string stats_json;
  std::vector<int> verify;
};

struct TestResult {
  std::string test;  // "pp128", "tg64"
  int n_tokens = 0;
  std::vector<double> tok_s;
  double median = 0, stddev = 0;
};

void summarize(TestResult& r) {
  std::vector<double> s = r.tok_s;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  r.median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  double mean = 0, var = 0;
  for (double x : s) mean += x / n;
  for (double x : s) var += (x - mean) * (x - mean);
  r.stddev = n > 1 ? std::sqrt(var / (n - 1)) : 0.0;
}

// The label llama.cpp tools print: general.file_type's name, else the type
// holding the most bytes.
std::string model_type(Model& model) {
  const gguf::File& f = model.file();
  if (const gguf::Value* ft = f.find("general.file_type"); ft && ft->is_integer()) {
    const std::string name = file_type_name((int)ft->i);
    if (name != "?") return name;
  }
  std::map<std::string, uint64_t> bytes;
  for (const TensorEntry& t : f.manifest.tensors) bytes[dtype_name(t.type)] += t.bytes;
  auto it = std::max_element(bytes.begin(), bytes.end(), [](auto& a, auto& b) { return a.second < b.second; });
  return it == bytes.end() ? "?" : it->first;
}

// Bytes of weights a decode step reads in a dense model: every tensor but
// the token embedding, of which one row (the memory-bound limit's numerator).
// (whole when it is also the output matrix). 0 for a model with experts
// (what a token reads depends on routing).
uint64_t weight_bytes_per_token(Model& model) {
  const auto& tensors = model.file().manifest.tensors;
  const bool tied = std::none_of(tensors.begin(), tensors.end(), [](const TensorEntry& t) { return t.name == "output.weight"; });
  uint64_t bytes = 0;
  for (const TensorEntry& t : tensors) {
    if (t.expert >= 0) return 0;
    if (t.name == "token_embd.weight" && !tied) {
      bytes += t.shape.size() == 2 && t.shape[1] > 0 ? t.bytes / t.shape[1] : 0;
      continue;
    }
    bytes += t.bytes;
  }
  return bytes;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int n_vocab) {
  std::uniform_int_distribution<int32_t> dist(0, n_vocab - 1);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = dist(rng);
  return out;
}

// One timed run of a test; returns tok/s.
double run_once(Session& session, const std::vector<int32_t>& tokens, bool prefill, StatsRecorder* stats) {
  session.reset();
  const double t0 = now_seconds();
  if (prefill) {
    if (stats) stats->begin_step();
    session.feed(tokens);
    if (stats) stats->end_step("prompt", (int)tokens.size());
  } else {
    for (int32_t t : tokens) {
      if (stats) stats->begin_step();
      session.feed({t});
      if (stats) stats->end_step("decode", 1);
    }
  }
  const double dt = now_seconds() - t0;
  return tokens.size() / std::max(dt, 1e-9);
}

TestResult run_test(Session& session, const BenchOptions& o, bool prefill, int n_vocab, std::mt19937& rng,
                    StatsRecorder* stats) {
  TestResult r;
  r.n_tokens = prefill ? o.n_prompt : o.n_gen;
  r.test = (prefill ? "pp" : "tg") + std::to_string(r.n_tokens);
  run_once(session, random_tokens(rng, r.n_tokens, n_vocab), prefill, nullptr);  // warm-up
  for (int k = 0; k < o.repeats; ++k)
    r.tok_s.push_back(run_once(session, random_tokens(rng, r.n_tokens, n_vocab), prefill, stats));
  summarize(r);
  return r;
}

// Steps of 1 + k rows (logits on each) at the positions after the prompt, n times; returns steps/s.
double verify_once(Session& session, int n_prompt_done, int k, int n, int n_vocab, std::mt19937& rng) {
  const double t0 = now_seconds();
  for (int i = 0; i < n; ++i) {
    session.feed(random_tokens(rng, 1 + k, n_vocab), k > 0);
    session.rewind(n_prompt_done);
  }
  return n / std::max(now_seconds() - t0, 1e-9);
}

void bench_verify(Model& model, const BenchOptions& o) {
  const ModelConfig& cfg = model.config();
  const int kmax = *std::max_element(o.verify.begin(), o.verify.end());
  const int n_prompt = std::max(1, o.n_prompt), steps = std::max(1, o.n_gen);
  Session session(model, n_prompt + kmax + 1, n_prompt);
  if (!session.can_rewind()) throw Error("--verify: a model with a recurrent state cannot forget drafted positions");
  std::mt19937 rng(o.seed);
  set_matmul_batch_invariant(true);
  session.feed(random_tokens(rng, n_prompt, cfg.n_vocab));
  std::vector<int> ks = {0};
  for (int k : o.verify)
    if (k > 0 && std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
  std::vector<TestResult> results;
  for (int k : ks) {
    TestResult r;
    r.test = "step1+" + std::to_string(k);
    r.n_tokens = 1 + k;
    verify_once(session, n_prompt, k, std::max(1, steps / 4), cfg.n_vocab, rng);  // warm-up
    for (int i = 0; i < o.repeats; ++i) r.tok_s.push_back(verify_once(session, n_prompt, k, steps, cfg.n_vocab, rng));
    summarize(r);
    results.push_back(r);
  }
  const std::string isa = isa_name(kernels().isa);
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const TestResult& r : results)
      out.push_back({{"model", resolve_model_path(o.model)}, {"type", model_type(model)}, {"threads", model.pool().size()},
                     {"isa", isa}, {"test", r.test}, {"rows", r.n_tokens}, {"steps_s_median", r.median},
                     {"cost_ratio", results[0].median / r.median}, {"samples", r.tok_s}, {"n_past", n_prompt}});
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("| %-14s | %7s | %-9s | %8s | %14s | %18s |\n", "type", "threads", "test", "isa", "steps/s (median)",
              "step time / 1 row");
  for (const TestResult& r : results)
    std::printf("| %-14s | %7d | %-9s | %8s | %7.2f ± %5.2f | %18.3f |\n", model_type(model).c_str(), model.pool().size(),
                r.test.c_str(), isa.c_str(), r.median, r.stddev, results[0].median / r.median);
}

void bench(const BenchOptions& o) {
  if (o.n_prompt < 0 || o.n_gen < 0 || (o.n_prompt == 0 && o.n_gen == 0))
    throw Error("nothing to benchmark: -p and -n must be >= 0 and not both 0");
  if (o.repeats < 1) throw Error("-r/--repetitions must be at least 1");
  if (!o.verify.empty()) {
    for (int k : o.verify)
      if (k < 0 || k > 64) throw Error("--verify: draft lengths must be between 0 and 64");
    const int kmax = *std::max_element(o.verify.begin(), o.verify.end());
    auto model = open_model(o.model, o.n_threads, o.model_flags, std::max(1, o.n_prompt) + kmax + 1,
                            std::max(1, o.n_prompt));
    bench_verify(*model, o);
    return;
  }
  const int n_ctx = std::max(o.n_prompt, o.n_gen) + 1;
  auto model = open_model(o.model, o.n_threads, o.model_flags, n_ctx, std::max(1, o.n_prompt));
  const ModelConfig& cfg = model->config();
  if (cfg.n_ctx_train > 0 && n_ctx > cfg.n_ctx_train)
    std::fprintf(stderr, "spool: note: %d positions exceed the model's training context %d\n", n_ctx, cfg.n_ctx_train);
  Session session(*model, n_ctx, std::max(1, o.n_prompt));
  std::mt19937 rng(o.seed);

  StatsRecorder stats(*model);  // timed runs only (not the warm-ups)
  std::vector<TestResult> results;
  if (o.n_prompt > 0) results.push_back(run_test(session, o, true, cfg.n_vocab, rng, &stats));
  if (o.n_gen > 0) results.push_back(run_test(session, o, false, cfg.n_vocab, rng, &stats));
  stats.end_progress();
  if (!o.stats_json.empty()) {
    nlohmann::json tests = nlohmann::json::array();
    for (const TestResult& r : results) tests.push_back({{"test", r.test}, {"tok_s_median", r.median}, {"samples", r.tok_s}});
    stats.write_json(o.stats_json, {{"command", "bench"}, {"tests", tests}, {"threads", model->pool().size()}});
  }

  const std::string type = model_type(*model);
  const std::string name = cfg.name.empty() ? resolve_model_path(o.model) : cfg.name;
  const int threads = model->pool().size();
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const TestResult& r : results)
      out.push_back({{"model", name}, {"model_path", resolve_model_path(o.model)}, {"arch", cfg.arch},
                     {"type", type}, {"threads", threads}, {"isa", isa_name(kernels().isa)}, {"test", r.test},
                     {"n_tokens", r.n_tokens}, {"tok_s_median", r.median}, {"tok_s_stddev", r.stddev},
                     {"samples", r.tok_s}, {"weight_bytes_per_token", weight_bytes_per_token(*model)}});
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("| %-28s | %-14s | %7s | %-6s | %8s | %14s |\n", "model", "type", "threads", "test", "isa",
              "tok/s (median)");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(16, '-').c_str(),
              std::string(9, '-').c_str(), std::string(8, '-').c_str(), std::string(10, '-').c_str(),
              std::string(16, '-').c_str());
  for (const TestResult& r : results)
    std::printf("| %-28s | %-14s | %7d | %-6s | %8s | %7.2f ± %5.2f |\n", name.c_str(), type.c_str(), threads,
                r.test.c_str(), isa_name(kernels().isa), r.median, r.stddev);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode speed (llama-bench's pp/tg tests)");
  cmd->footer("Kernels: the best instruction set of this CPU (the isa column); SPOOL_ISA=scalar|avx2|avx512|amx|neon\n"
              "caps it, e.g. SPOOL_ISA=avx512 on an AMX host measures AVX-512 VNNI without the AMX prefill tiles.");
  cmd->add_option("-m,--model", o->model, "Model: GGUF file or Hugging Face directory");
  cmd->add_option("-t,--threads", o->n_threads, "Threads (default: all cores)");
  cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens in the prefill test (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", o->n_gen, "Tokens generated in the decode test (0: skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repeats, "Timed runs per test, after one warm-up")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed for the random token ids")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print results as a JSON array");
  add_model_flags(cmd, o->model_flags);
  cmd->add_option("--verify", o->verify,
                  "Instead of pp/tg: the cost of speculative verify steps of 1 + K rows (comma-separated K) after a "
                  "prompt of -p tokens, -n steps each, against steps of one row")
      ->delimiter(',');
  cmd->add_option("--stats-json", o->stats_json, "Write per-token and total statistics of the timed runs as JSON");
  cmd->callback([o] { bench(*o); });
}

}  // namespace spool::cli
