// Serving benchmark: aggregate decode throughput of the engine at several
// concurrencies. For each concurrency C it submits C greedy requests with
// distinct prompts at once and measures decode tokens per second over the
// window in which all C are decoding (after the last first token, until the
// first finish). Usage:
//   spool_engine_bench -m MODEL [-t THREADS] [-n TOKENS] [-p PROMPT_TOKENS] [-c 1,2,4,8]
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/engine.h"

using namespace spool;
using Clock = std::chrono::steady_clock;

namespace {

struct Run {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0, started = 0;
  std::vector<bool> has_token;
  Clock::time_point all_started, first_finish;
  std::vector<Clock::time_point> token_times;
};

double measure(Engine& engine, int n_vocab, int concurrency, int n_tokens, int prompt_tokens) {
  Run run;
  run.has_token.assign(concurrency, false);
  for (int i = 0; i < concurrency; ++i) {
    RequestParams p;
    for (int j = 0; j < prompt_tokens; ++j) p.prompt.push_back((int32_t)(1 + (97 * i + 31 * j + i * j) % (n_vocab - 2)));
    p.max_tokens = n_tokens;
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    engine.submit(p, [&run, concurrency, i](const RequestEvent& ev) {
      std::lock_guard<std::mutex> lock(run.mu);
      const Clock::time_point now = Clock::now();
      for (size_t k = 0; k < ev.tokens.size(); ++k) run.token_times.push_back(now);
      if (!ev.tokens.empty() && !run.has_token[i]) {
        run.has_token[i] = true;
        if (++run.started == concurrency) run.all_started = now;
      }
      if (ev.finished) {
        if (run.finished++ == 0) run.first_finish = now;
        run.cv.notify_all();
      }
    });
  }
  std::unique_lock<std::mutex> lock(run.mu);
  run.cv.wait(lock, [&] { return run.finished == concurrency; });
  // The window in which all requests were decoding: from the last first
  // token to the first finish. Tokens inside it, over its length.
  if (run.started < concurrency || run.first_finish <= run.all_started) {
    std::fprintf(stderr, "concurrency %d: the requests never all decoded at once (raise -n)\n", concurrency);
    return 0;
  }
  const Clock::time_point end = run.first_finish;
  int n = 0;
  for (const auto& t : run.token_times)
    if (t > run.all_started && t <= end) ++n;
  const double secs = std::chrono::duration<double>(end - run.all_started).count();
  return secs > 0 ? n / secs : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, levels = "1,2,4,8";
  int threads = 0, n_tokens = 32, prompt_tokens = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "-m") model_path = v;
    else if (a == "-t") threads = std::atoi(v.c_str());
    else if (a == "-n") n_tokens = std::atoi(v.c_str());
    else if (a == "-p") prompt_tokens = std::atoi(v.c_str());
    else if (a == "-c") levels = v;
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "usage: %s -m MODEL [-t THREADS] [-n TOKENS] [-p PROMPT_TOKENS] [-c 1,2,4,8]\n", argv[0]);
    return 2;
  }
  try {
    auto model = load_model(model_path, LoadOptions{threads});
    std::vector<int> cs;
    std::stringstream ss(levels);
    for (std::string x; std::getline(ss, x, ',');) cs.push_back(std::atoi(x.c_str()));
    int max_c = 1;
    for (int c : cs) max_c = std::max(max_c, c);
    EngineOptions o;
    o.n_ctx = prompt_tokens + n_tokens + 16;
    o.max_running = max_c;
    o.prefix_cache = false;
    auto engine = make_engine(*model, o);
    std::printf("model %s, threads %d, %d prompt + %d generated tokens per request\n", model_path.c_str(), threads,
                prompt_tokens, n_tokens);
    std::printf("%-12s %-14s %s\n", "concurrency", "decode tok/s", "vs concurrency 1");
    double base = 0;
    for (int c : cs) {
      const double tps = measure(*engine, model->config().n_vocab, c, n_tokens, prompt_tokens);
      if (c == 1) base = tps;
      std::printf("%-12d %-14.2f %s\n", c, tps, base > 0 ? (std::to_string(tps / base).substr(0, 4) + "x").c_str() : "");
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
