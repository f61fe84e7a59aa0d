// Prometheus text for /metrics; see metrics.h.
#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace spool::server {

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void append_metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         number(value) + "\n";
}

}  // namespace

void HttpCounters::count(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++by_status_[status];
}

std::map<int, uint64_t> HttpCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_status_;
}

void append_histogram(std::string& out, const std::string& name, const std::string& help, const LatencyHistogram& h) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  for (size_t i = 0; i < h.bounds().size(); ++i)
    out += name + "_bucket{le=\"" + number(h.bounds()[i]) + "\"} " + std::to_string(h.cumulative(i)) + "\n";
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(h.count()) + "\n";
  out += name + "_sum " + number(h.sum()) + "\n";
  out += name + "_count " + std::to_string(h.count()) + "\n";
}

// Streaming weight store: what was read from storage and how often a needed
// unit was already in memory (cached from earlier use, or read ahead in time).
void append_weight_metrics(std::string& out, const StoreStats& w) {
  uint64_t lookups = 0, hits = 0;
  for (const LayerCacheStats& l : w.layers) {
    lookups += l.lookups();
    hits += l.hits + l.prefetched;
  }
  append_metric(out, "spool_weight_bytes_read_total", "counter", "Bytes the weight store read from storage.",
                (double)w.bytes_read);
  append_metric(out, "spool_weight_read_requests_total", "counter", "Storage reads issued by the weight store.",
                (double)w.requests);
  append_metric(out, "spool_weight_cache_lookups_total", "counter", "Streamed weight units needed by compute.",
                (double)lookups);
  append_metric(out, "spool_weight_cache_hits_total", "counter",
                "Streamed weight units already in memory when needed (cached or read ahead).", (double)hits);
  append_metric(out, "spool_weight_cache_hit_ratio", "gauge", "spool_weight_cache_hits_total / lookups.",
                lookups ? (double)hits / (double)lookups : 0.0);
  append_metric(out, "spool_weight_io_wait_seconds_total", "counter", "Time compute waited for weight reads.",
                w.io_wait_ns / 1e9);
  append_metric(out, "spool_weight_cache_evictions_total", "counter", "Weight cache evictions.", (double)w.evictions);
}

std::string render_metrics(const EngineStats& s, const std::map<int, uint64_t>& http_by_status,
                           const StoreStats* weights) {
  std::string out;
  if (weights) append_weight_metrics(out, *weights);
  append_metric(out, "spool_requests_running", "gauge", "Requests being prefilled or decoded.", s.running);
  append_metric(out, "spool_requests_waiting", "gauge", "Requests queued (or preempted) waiting to run.", s.waiting);
  append_metric(out, "spool_requests_finished_total", "counter", "Requests finished (any reason).",
                (double)s.requests_finished);
  append_metric(out, "spool_prompt_tokens_total", "counter", "Prompt tokens of submitted requests.",
                (double)s.prompt_tokens);
  append_metric(out, "spool_generated_tokens_total", "counter", "Tokens generated.", (double)s.generated_tokens);
  append_metric(out, "spool_prefix_cache_hit_tokens_total", "counter",
                "Prompt tokens not recomputed thanks to the prefix cache.", (double)s.prefix_hit_tokens);
  append_metric(out, "spool_kv_blocks_total", "gauge", "KV cache blocks in the pool.", s.kv_blocks_total);
  append_metric(out, "spool_kv_blocks_used", "gauge", "KV cache blocks held by requests (running or preempted).",
                s.kv_blocks_used);
  append_metric(out, "spool_kv_blocks_cached", "gauge", "KV cache blocks unreferenced but kept for prefix reuse.",
                s.kv_blocks_cached);
  append_metric(out, "spool_kv_bytes", "gauge", "Bytes of the KV pool (reserved at start).", (double)s.kv_bytes);
  append_metric(out, "spool_preemptions_total", "counter", "Requests preempted when KV blocks ran out.",
                (double)s.preemptions);
  out += "# HELP spool_http_responses_total HTTP responses by status code.\n"
         "# TYPE spool_http_responses_total counter\n";
  for (const auto& [status, n] : http_by_status)
    out += "spool_http_responses_total{code=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  append_histogram(out, "spool_time_to_first_token_seconds", "Time from submission to the first generated token.",
                   s.ttft);
  append_histogram(out, "spool_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.",
                   s.inter_token);
  return out;
}

}  // namespace spool::server
