// Prometheus text for /metrics; see metrics.h.
#include "server/metrics.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace spool::server {

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
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

void append_histogram(std::string& out, const std::string& name, const std::string& help, const LatencyHistogram& h,
                      const std::string& labels, bool header) {
  if (header) out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string pre = labels.empty() ? "" : labels + ",";
  const std::string only = labels.empty() ? "" : "{" + labels + "}";
  for (size_t i = 0; i < h.bounds().size(); ++i)
    out += name + "_bucket{" + pre + "le=\"" + number(h.bounds()[i]) + "\"} " + std::to_string(h.cumulative(i)) + "\n";
  out += name + "_bucket{" + pre + "le=\"+Inf\"} " + std::to_string(h.count()) + "\n";
  out += name + "_sum" + only + " " + number(h.sum()) + "\n";
  out += name + "_count" + only + " " + std::to_string(h.count()) + "\n";
}

namespace {

std::string model_label(const std::string& id) {
  std::string v;
  for (char c : id) {
    if (c == '\\' || c == '"') v += '\\';
    if (c == '\n') {
      v += "\\n";
      continue;
    }
    v += c;
  }
  return "model=\"" + v + "\"";
}

// One family: the total, then per model when there are several. `ratio`
// families total as sum(num) / sum(den) instead of a sum.
class Families {
 public:
  Families(std::string& out, const std::vector<ModelFigures>& models) : out_(out), models_(models) {}

  template <typename Value>
  void add(const char* name, const char* type, const char* help, Value value, bool streaming_only = false) {
    std::vector<std::pair<const ModelFigures*, double>> rows;
    double total = 0;
    for (const ModelFigures& m : models_) {
      if (streaming_only && !m.weights) continue;
      const double v = value(m);
      rows.emplace_back(&m, v);
      total += v;
    }
    if (rows.empty()) return;
    emit(name, type, help, total, rows);
  }

  // num / den per model; the total is sum(num) / sum(den).
  template <typename Num, typename Den>
  void ratio(const char* name, const char* help, Num num, Den den) {
    std::vector<std::pair<const ModelFigures*, double>> rows;
    double n = 0, d = 0;
    for (const ModelFigures& m : models_) {
      if (!m.weights) continue;
      const double a = num(m), b = den(m);
      rows.emplace_back(&m, b > 0 ? a / b : 0.0);
      n += a;
      d += b;
    }
    if (rows.empty()) return;
    emit(name, "gauge", help, d > 0 ? n / d : 0.0, rows);
  }

 private:
  void emit(const char* name, const char* type, const char* help, double total,
            const std::vector<std::pair<const ModelFigures*, double>>& rows) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
            number(total) + "\n";
    if (models_.size() > 1)
      for (const auto& [m, v] : rows) out_ += std::string(name) + "{" + model_label(m->id) + "} " + number(v) + "\n";
  }

  std::string& out_;
  const std::vector<ModelFigures>& models_;
};

// Streaming weight store: what was read from storage and how often a needed
// unit was already in memory (cached from earlier use, or read ahead in time).
void append_weight_metrics(Families& f) {
  f.add("spool_weight_bytes_read_total", "counter", "Bytes the weight store read from storage.",
        [](const ModelFigures& m) { return (double)m.weights->bytes_read; }, true);
  f.add("spool_weight_read_requests_total", "counter", "Storage reads issued by the weight store.",
        [](const ModelFigures& m) { return (double)m.weights->requests; }, true);
  f.add("spool_weight_cache_lookups_total", "counter", "Streamed weight units needed by compute.",
        [](const ModelFigures& m) { return (double)m.weights->lookups(); }, true);
  f.add("spool_weight_cache_hits_total", "counter",
        "Streamed weight units already in memory when needed (cached or read ahead).",
        [](const ModelFigures& m) { return (double)m.weights->hits_total(); }, true);
  f.ratio("spool_weight_cache_hit_ratio", "spool_weight_cache_hits_total / lookups.",
          [](const ModelFigures& m) { return (double)m.weights->hits_total(); },
          [](const ModelFigures& m) { return (double)m.weights->lookups(); });
  f.add("spool_weight_io_wait_seconds_total", "counter", "Time compute waited for weight reads.",
        [](const ModelFigures& m) { return m.weights->io_wait_ns / 1e9; }, true);
  f.add("spool_weight_cache_evictions_total", "counter", "Weight cache evictions.",
        [](const ModelFigures& m) { return (double)m.weights->evictions; }, true);
  f.add("spool_weight_read_retries_total", "counter",
        "Storage requests sent again after a transient failure (HTTP 5xx/429, dropped connection, short body).",
        [](const ModelFigures& m) { return (double)m.weights->read_retries; }, true);
  f.add("spool_weight_read_stalls_total", "counter",
        "Expert reads that outlasted --read-stall-ms: their requests were set aside while the others went on.",
        [](const ModelFigures& m) { return (double)m.weights->read_stalls; }, true);
}

// Expert parallelism (--dist ep): the home rank's traffic and waiting, and
// each other rank's last report, labelled {rank="N"} (and the model's id
// when there are several).
void append_dist_metrics(std::string& out, const std::vector<ModelFigures>& models) {
  struct Series {
    const char *name, *type, *help;
    double (*value)(const ExpertParallelStats&);
  };
  static const Series home[] = {
      {"spool_dist_ranks", "gauge", "Processes of --dist ep, the home rank included.",
       [](const ExpertParallelStats& d) { return (double)d.ranks; }},
      {"spool_dist_messages_total", "counter", "Work messages the home rank sent to other ranks.",
       [](const ExpertParallelStats& d) { return (double)d.messages; }},
      {"spool_dist_sent_bytes_total", "counter", "Bytes of work (hidden-state rows) sent to other ranks.",
       [](const ExpertParallelStats& d) { return (double)d.bytes_sent; }},
      {"spool_dist_received_bytes_total", "counter", "Bytes of answers (expert outputs) received from other ranks.",
       [](const ExpertParallelStats& d) { return (double)d.bytes_received; }},
      {"spool_dist_expert_jobs_total", "counter", "Routed-expert jobs placed (one expert of one layer pass).",
       [](const ExpertParallelStats& d) { return (double)d.jobs; }},
      {"spool_dist_expert_jobs_home_total", "counter", "Of the jobs, those computed by the home rank.",
       [](const ExpertParallelStats& d) { return (double)d.jobs_home; }},
      {"spool_dist_expert_jobs_moved_total", "counter",
       "Of the jobs, those computed by a rank other than the expert's owner, to balance the ranks.",
       [](const ExpertParallelStats& d) { return (double)d.jobs_moved; }},
      {"spool_dist_wait_seconds_total", "counter", "Time the home rank waited for other ranks' answers.",
       [](const ExpertParallelStats& d) { return d.wait_seconds; }},
      {"spool_dist_network_seconds_total", "counter",
       "Of that wait, the part beyond the slowest answering rank's compute time in each pass: network and MPI.",
       [](const ExpertParallelStats& d) { return d.network_seconds; }},
  };
  struct RankSeries {
    const char *name, *help;
    double (*value)(const ExpertRankStats&);
  };
  static const RankSeries per_rank[] = {
      {"spool_dist_rank_answers_total", "Work messages a rank answered.",
       [](const ExpertRankStats& r) { return (double)r.answers; }},
      {"spool_dist_rank_bytes_read_total", "Bytes a rank's weight store read from its storage (its load included).",
       [](const ExpertRankStats& r) { return (double)r.bytes_read; }},
      {"spool_dist_rank_cache_lookups_total", "Expert units a rank's compute asked its weight store for.",
       [](const ExpertRankStats& r) { return (double)r.lookups; }},
      {"spool_dist_rank_cache_hits_total", "Of a rank's lookups, those already in memory (cached or read ahead).",
       [](const ExpertRankStats& r) { return (double)r.hits; }},
      {"spool_dist_rank_io_wait_seconds_total", "Time a rank's compute waited for reads.",
       [](const ExpertRankStats& r) { return r.io_wait_seconds; }},
      {"spool_dist_rank_compute_seconds_total", "Time a rank spent on the home rank's work (its reads included).",
       [](const ExpertRankStats& r) { return r.compute_seconds; }},
  };
  std::vector<const ModelFigures*> with;
  for (const ModelFigures& m : models)
    if (m.dist) with.push_back(&m);
  if (with.empty()) return;
  auto labels = [&](const ModelFigures& m, const std::string& more) {
    std::string l = models.size() > 1 ? model_label(m.id) : "";
    if (!more.empty()) l += (l.empty() ? "" : ",") + more;
    return l.empty() ? std::string() : "{" + l + "}";
  };
  for (const Series& s : home) {
    out += std::string("# HELP ") + s.name + " " + s.help + "\n# TYPE " + s.name + " " + s.type + "\n";
    for (const ModelFigures* m : with) out += s.name + labels(*m, "") + " " + number(s.value(*m->dist)) + "\n";
  }
  for (const RankSeries& s : per_rank) {
    out += std::string("# HELP ") + s.name + " " + s.help + "\n# TYPE " + s.name + " counter\n";
    for (const ModelFigures* m : with)
      for (const ExpertRankStats& r : m->dist->rank)
        out += s.name + labels(*m, "rank=\"" + std::to_string(r.rank) + "\"") + " " + number(s.value(r)) + "\n";
  }
}

void append_histograms(std::string& out, const std::vector<ModelFigures>& models, const char* name, const char* help,
                       LatencyHistogram EngineStats::*member) {
  LatencyHistogram total;
  for (const ModelFigures& m : models) total.merge(m.stats.*member);
  append_histogram(out, name, help, total);
  if (models.size() > 1)
    for (const ModelFigures& m : models) append_histogram(out, name, help, m.stats.*member, model_label(m.id), false);
}

}  // namespace

std::string render_metrics(const std::vector<ModelFigures>& models, const std::map<int, uint64_t>& http_by_status) {
  std::string out;
  Families f(out, models);
  append_weight_metrics(f);
  using M = const ModelFigures&;
  f.add("spool_requests_running", "gauge", "Requests being prefilled or decoded.", [](M m) { return (double)m.stats.running; });
  f.add("spool_requests_waiting", "gauge", "Requests queued (or preempted) waiting to run.",
        [](M m) { return (double)m.stats.waiting; });
  f.add("spool_requests_finished_total", "counter", "Requests finished (any reason).",
        [](M m) { return (double)m.stats.requests_finished; });
  f.add("spool_prompt_tokens_total", "counter", "Prompt tokens of submitted requests.",
        [](M m) { return (double)m.stats.prompt_tokens; });
  f.add("spool_generated_tokens_total", "counter", "Tokens generated.", [](M m) { return (double)m.stats.generated_tokens; });
  f.add("spool_prefix_cache_hit_tokens_total", "counter", "Prompt tokens not recomputed thanks to the prefix cache.",
        [](M m) { return (double)m.stats.prefix_hit_tokens; });
  f.add("spool_computed_tokens_total", "counter",
        "Token positions run through the model (prefill, decode, recomputation after preemption).",
        [](M m) { return (double)m.stats.computed_tokens; });
  f.add("spool_kv_blocks_total", "gauge", "KV cache blocks in the pool.", [](M m) { return (double)m.stats.kv_blocks_total; });
  f.add("spool_kv_blocks_used", "gauge", "KV cache blocks held by requests (running or preempted).",
        [](M m) { return (double)m.stats.kv_blocks_used; });
  f.add("spool_kv_blocks_cached", "gauge", "KV cache blocks unreferenced but kept for prefix reuse.",
        [](M m) { return (double)m.stats.kv_blocks_cached; });
  f.add("spool_kv_bytes", "gauge", "Bytes of the KV pool (reserved at start).", [](M m) { return (double)m.stats.kv_bytes; });
  f.add("spool_preemptions_total", "counter", "Requests preempted when KV blocks ran out.",
        [](M m) { return (double)m.stats.preemptions; });
  f.add("spool_prefix_cache_enabled", "gauge",
        "1 when prompt prefixes are reused; 0 when off (--no-prefix-cache, or a hybrid model without "
        "--state-snapshots).",
        [](M m) { return m.stats.prefix_cache ? 1.0 : 0.0; });
  f.add("spool_recurrent_state_bytes", "gauge",
        "Bytes of per-sequence recurrent state held now (hybrid linear-attention models).",
        [](M m) { return (double)m.stats.recurrent_state_bytes; });
  f.add("spool_recurrent_sequences", "gauge", "Sequences holding a recurrent state now (hybrid models).",
        [](M m) { return (double)m.stats.recurrent_sequences; });
  f.add("spool_state_snapshots", "gauge",
        "Recurrent-state snapshots held for prefix reuse (hybrid models, --state-snapshots).",
        [](M m) { return (double)m.stats.state_snapshots; });
  f.add("spool_state_snapshot_bytes", "gauge", "Bytes of the recurrent-state snapshots held now.",
        [](M m) { return (double)m.stats.state_snapshot_bytes; });
  f.add("spool_state_snapshot_hits_total", "counter",
        "Admissions of hybrid-model requests that restored a state snapshot (their prefix was not recomputed).",
        [](M m) { return (double)m.stats.state_snapshot_hits; });
  f.add("spool_state_snapshot_misses_total", "counter",
        "Admissions of hybrid-model requests long enough for a snapshot that found none usable.",
        [](M m) { return (double)m.stats.state_snapshot_misses; });
  f.add("spool_kv_disk_enabled", "gauge", "1 when the KV disk tier is in use (--kv-disk; off with --no-kv-disk).",
        [](M m) { return m.stats.kv_disk ? 1.0 : 0.0; });
  f.add("spool_kv_disk_hit_tokens_total", "counter",
        "Prompt tokens whose KV was loaded from the disk tier instead of recomputed.",
        [](M m) { return (double)m.stats.kv_disk_hit_tokens; });
  f.add("spool_kv_disk_loaded_bytes_total", "counter", "Bytes of KV blocks loaded from the disk tier.",
        [](M m) { return (double)m.stats.kv_disk_stats.hit_bytes; });
  f.add("spool_kv_disk_load_seconds_total", "counter", "Time spent loading KV blocks from the disk tier.",
        [](M m) { return m.stats.kv_disk_stats.load_seconds; });
  f.add("spool_kv_disk_written_bytes_total", "counter", "Bytes of KV blocks written to the disk tier.",
        [](M m) { return (double)m.stats.kv_disk_stats.write_bytes; });
  f.add("spool_kv_disk_pending_writes", "gauge", "KV blocks queued for writing to the disk tier.",
        [](M m) { return (double)m.stats.kv_disk_stats.pending; });
  f.add("spool_kv_disk_dropped_writes_total", "counter",
        "KV blocks not written: the write queue was full, or the disk refused (full, read-only).",
        [](M m) { return (double)(m.stats.kv_disk_stats.writes_dropped + m.stats.kv_disk_stats.write_errors); });
  f.add("spool_kv_disk_rejected_total", "counter",
        "Disk-tier block files found damaged or foreign on load, deleted and recomputed.",
        [](M m) { return (double)m.stats.kv_disk_stats.rejected; });
  f.add("spool_kv_disk_bytes", "gauge", "Bytes of KV block files in the disk tier now.",
        [](M m) { return (double)m.stats.kv_disk_stats.bytes; });
  f.add("spool_spec_enabled", "gauge", "Speculative decoding: 0 off, 1 auto (the governor decides), 2 on.",
        [](M m) { return (double)(int)m.stats.spec.mode; });
  f.add("spool_spec_drafted_tokens_total", "counter", "Drafted tokens verified by the model (speculative decoding).",
        [](M m) { return (double)m.stats.spec.drafted; });
  f.add("spool_spec_accepted_tokens_total", "counter", "Drafted tokens accepted (each one a decode step saved).",
        [](M m) { return (double)m.stats.spec.accepted; });
  f.add("spool_spec_verify_steps_total", "counter", "Sequence-steps that verified a draft.",
        [](M m) { return (double)m.stats.spec.verify_steps; });
  f.add("spool_spec_declined_steps_total", "counter",
        "Sequence-steps with a draft on offer that the governor did not verify (it would not have paid).",
        [](M m) { return (double)m.stats.spec.declined; });
  f.add("spool_spec_drafting_sequences", "gauge", "Sequences that verified a draft in the last step.",
        [](M m) { return (double)m.stats.spec.drafting; });
  f.add("spool_spec_acceptance_estimate", "gauge",
        "The governor's mean estimate of P(next drafted token accepted) over the last step's candidates.",
        [](M m) { return m.stats.spec.acceptance; });
  f.add("spool_spec_verify_cost_ratio", "gauge",
        "Measured cost of the last step with drafts over the same step without them (0: none yet).",
        [](M m) { return m.stats.spec.verify_cost; });
  f.add("spool_spec_draft_model", "gauge", "1 when a draft model (-md) drafts besides n-gram lookup.",
        [](M m) { return m.stats.spec.draft_model ? 1.0 : 0.0; });
  f.add("spool_spec_model_drafted_tokens_total", "counter", "Of the drafted tokens verified, those the draft model made.",
        [](M m) { return (double)m.stats.spec.model_drafted; });
  f.add("spool_spec_model_accepted_tokens_total", "counter", "Of the draft model's verified tokens, those accepted.",
        [](M m) { return (double)m.stats.spec.model_accepted; });
  f.add("spool_spec_draft_seconds_total", "counter", "Seconds spent in the draft model's passes.",
        [](M m) { return m.stats.spec.draft_seconds; });
  out += "# HELP spool_http_responses_total HTTP responses by status code.\n"
         "# TYPE spool_http_responses_total counter\n";
  for (const auto& [status, n] : http_by_status)
    out += "spool_http_responses_total{code=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  append_dist_metrics(out, models);
  append_histograms(out, models, "spool_time_to_first_token_seconds", "Time from submission to the first generated token.",
                    &EngineStats::ttft);
  append_histograms(out, models, "spool_inter_token_latency_seconds",
                    "Time between consecutive generated tokens of a request.", &EngineStats::inter_token);
  return out;
}

std::string render_metrics(const EngineStats& s, const std::map<int, uint64_t>& http_by_status,
                           const StoreStats* weights) {
  return render_metrics(std::vector<ModelFigures>{ModelFigures{"default", s, weights}}, http_by_status);
}

std::pair<uint64_t, uint64_t> process_memory() {
  std::ifstream in("/proc/self/status");
  uint64_t rss = 0, peak = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) rss = std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    if (line.starts_with("VmHWM:")) peak = std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return {rss, peak};
}

std::string process_metrics() {
  std::string out;
  if (const uint64_t rss = process_memory().first)
    out += "# HELP spool_process_resident_memory_bytes Resident set size of the server process.\n"
           "# TYPE spool_process_resident_memory_bytes gauge\nspool_process_resident_memory_bytes " +
           std::to_string(rss) + "\n";
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 mi = mallinfo2();
  out += "# HELP spool_process_heap_bytes malloc heap over all arenas: bytes in use (small blocks and mmapped large "
         "ones) and bytes free but held by the allocator.\n# TYPE spool_process_heap_bytes gauge\n"
         "spool_process_heap_bytes{state=\"in_use\"} " + std::to_string(mi.uordblks + mi.hblkhd) +
         "\nspool_process_heap_bytes{state=\"free\"} " + std::to_string(mi.fordblks) + "\n";
#endif
  return out;
}

std::string RequestOutcomes::render(uint64_t pipeline_cancelled, uint64_t pipeline_failed) const {
  auto family = [](const char* name, const char* help, uint64_t api, uint64_t batch, uint64_t pipeline) {
    const std::string n = name;
    return "# HELP " + n + " " + help + "\n# TYPE " + n + " counter\n" + n + " " + std::to_string(api + batch + pipeline) +
           "\n" + n + "{source=\"api\"} " + std::to_string(api) + "\n" + n + "{source=\"batch\"} " +
           std::to_string(batch) + "\n" + n + "{source=\"pipeline\"} " + std::to_string(pipeline) + "\n";
  };
  return family("spool_requests_cancelled_total",
                "Engine requests ended before they finished: the client went away or --request-timeout passed (api), "
                "the batch was cancelled (batch), the run was cancelled or the step timed out (pipeline).",
                cancelled.load(), batch_cancelled.load(), pipeline_cancelled) +
         family("spool_requests_failed_total", "Engine requests that failed in the engine (e.g. a weight read).",
                failed.load(), batch_failed.load(), pipeline_failed);
}

}  // namespace spool::server
