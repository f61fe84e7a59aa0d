// /metrics in Prometheus' text exposition format (version 0.0.4): engine
// gauges and counters (requests, tokens, KV blocks, prefix-cache hits,
// preemptions), the streaming weight cache (bytes read, hits), HTTP responses by status, and histograms of time to first
// token and inter-token latency.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

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

// Appends a histogram (cumulative _bucket{le=...} lines, _sum, _count).
void append_histogram(std::string& out, const std::string& name, const std::string& help, const LatencyHistogram& h);

// `weights`: the model's weight-store counters when it streams (null: resident, no weight-cache metrics).
std::string render_metrics(const EngineStats& stats, const std::map<int, uint64_t>& http_by_status,
                           const StoreStats* weights = nullptr);

}  // namespace spool::server
