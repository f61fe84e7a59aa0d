// /metrics in Prometheus' text exposition format (version 0.0.4): engine
// gauges and counters (requests, tokens, KV blocks, prefix-cache hits,
// preemptions), the streaming weight cache (bytes read, hits), HTTP responses by status, and histograms of time to first
// token and inter-token latency.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "model/expert_parallel.h"
#include "runtime/engine.h"
#include "weights/store_stats.h"

namespace spool::server {

// HTTP responses by status code; thread-safe.
class HttpCounters {
 public:
  void count(int status);
  std::map<int, uint64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> by_status_;
};

// Engine requests that ended early or failed in the engine (e.g. a weight
// read), by where they came from; thread-safe. API completions are cancelled
// when the client goes away or --request-timeout passes, a batch's requests
// when the batch is cancelled; pipeline steps are counted by the pipeline
// runner and passed to render().
struct RequestOutcomes {
  std::atomic<uint64_t> cancelled{0}, failed{0};              // /v1/completions, /v1/chat/completions
  std::atomic<uint64_t> batch_cancelled{0}, batch_failed{0};  // /v1/batches
  // spool_requests_cancelled_total and spool_requests_failed_total: the total
  // (unlabelled) and one series per source {source="api|batch|pipeline"}.
  std::string render(uint64_t pipeline_cancelled = 0, uint64_t pipeline_failed = 0) const;
};

// VmRSS and VmHWM of this process, bytes (0 when unknown).
std::pair<uint64_t, uint64_t> process_memory();

// This process's memory: resident set (VmRSS) and, with glibc, the malloc
// heap's bytes in use and free-but-held (mallinfo2, all arenas), so a growing
// RSS can be told apart as live data or fragmentation.
std::string process_metrics();

// Appends a histogram (cumulative _bucket{le=...} lines, _sum, _count).
// `labels`: extra labels inside the braces, e.g. `model="a"` ("" for none).
void append_histogram(std::string& out, const std::string& name, const std::string& help, const LatencyHistogram& h,
                      const std::string& labels = "", bool header = true);

// One served model's figures.
struct ModelFigures {
  std::string id;
  EngineStats stats;
  const StoreStats* weights = nullptr;  // weight-store counters when it streams (null: resident)
  const ExpertParallelStats* dist = nullptr;  // expert parallelism over other processes (--dist ep), else null
};

// Every series is the total over the models (unlabeled; histograms merged);
// with several models each also gets one {model="ID"} series. Weight-cache
// series appear when a model streams.
std::string render_metrics(const std::vector<ModelFigures>& models, const std::map<int, uint64_t>& http_by_status);
// One model.
std::string render_metrics(const EngineStats& stats, const std::map<int, uint64_t>& http_by_status,
                           const StoreStats* weights = nullptr);

}  // namespace spool::server
