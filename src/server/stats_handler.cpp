// GET /v1/stats: counters since start, per served model (engine: requests,
// tokens, KV blocks, prefix-cache hits, latency histograms; --mem-budget; the
// weight store when it streams: bytes read, cache lookups and hits per layer,
// I/O wait, its share of the budget and its arena), the process's resident memory, pipeline runs and HTTP
// responses. Totals only: a client takes differences between two polls for
// rates (`time` is the server's clock, seconds, for the divisor).
#include "server/stats_handler.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "server/metrics.h"
#include "server/openai_format.h"
#include "server/server_context.h"

namespace spool::server {

namespace {

json histogram_json(const LatencyHistogram& h) {
  json buckets = json::array();
  for (size_t i = 0; i < h.bounds().size(); ++i) buckets.push_back({{"le", h.bounds()[i]}, {"count", h.cumulative(i)}});
  return {{"count", h.count()}, {"sum", h.sum()}, {"buckets", buckets}};
}

}  // namespace

json spec_stats_json(const SpecStats& s) {
  return {{"mode", spec_mode_name(s.mode)},
          {"max_draft", s.max_draft},
          {"drafted_tokens", s.drafted},
          {"accepted_tokens", s.accepted},
          {"acceptance_rate", s.drafted ? (double)s.accepted / s.drafted : 0.0},
          {"verify_steps", s.verify_steps},
          {"declined_steps", s.declined},
          {"drafting_sequences", s.drafting},
          {"acceptance_estimate", s.acceptance},
          {"verify_cost_ratio", s.verify_cost},
          {"draft_model", s.draft_model},
          {"model_drafted_tokens", s.model_drafted},
          {"model_accepted_tokens", s.model_accepted},
          {"draft_seconds", s.draft_seconds}};
}

namespace {

json engine_json(const EngineStats& s) {
  return {{"running", s.running},
          {"waiting", s.waiting},
          {"requests_finished", s.requests_finished},
          {"prompt_tokens", s.prompt_tokens},
          {"generated_tokens", s.generated_tokens},
          {"prefix_hit_tokens", s.prefix_hit_tokens},
          {"computed_tokens", s.computed_tokens},
          {"kv_blocks_total", s.kv_blocks_total},
          {"kv_blocks_used", s.kv_blocks_used},
          {"kv_blocks_cached", s.kv_blocks_cached},
          {"kv_bytes", s.kv_bytes},
          {"preemptions", s.preemptions},
          {"prefix_cache", s.prefix_cache},
          {"recurrent_state_bytes", s.recurrent_state_bytes},
          {"recurrent_sequences", s.recurrent_sequences},
          {"state_snapshots", s.state_snapshots},
          {"state_snapshot_bytes", s.state_snapshot_bytes},
          {"state_snapshot_hits", s.state_snapshot_hits},
          {"state_snapshot_misses", s.state_snapshot_misses},
          {"kv_disk",
           s.kv_disk ? json{{"hit_tokens", s.kv_disk_hit_tokens},
                            {"loaded_bytes", s.kv_disk_stats.hit_bytes},
                            {"load_seconds", s.kv_disk_stats.load_seconds},
                            {"files", s.kv_disk_stats.files},
                            {"bytes", s.kv_disk_stats.bytes},
                            {"written_bytes", s.kv_disk_stats.write_bytes},
                            {"pending_writes", s.kv_disk_stats.pending},
                            {"dropped_writes", s.kv_disk_stats.writes_dropped + s.kv_disk_stats.write_errors},
                            {"rejected", s.kv_disk_stats.rejected},
                            {"evicted", s.kv_disk_stats.evicted}}
                     : json(nullptr)},
          {"speculative", spec_stats_json(s.spec)},
          {"ttft_seconds", histogram_json(s.ttft)},
          {"inter_token_seconds", histogram_json(s.inter_token)}};
}

json weights_json(const StoreStats& w) {
  json layers = json::array();
  for (const LayerCacheStats& l : w.layers)
    layers.push_back({{"hits", l.hits}, {"prefetched", l.prefetched}, {"inflight", l.inflight}, {"misses", l.misses},
                      {"wait_seconds", (double)l.wait_ns / 1e9}, {"read_seconds", (double)l.read_ns / 1e9},
                      {"read_bytes", l.read_bytes}});
  const uint64_t lookups = w.lookups(), hits = w.hits_total();
  return {{"bytes_read", w.bytes_read},         {"load_bytes", w.load_bytes},
          {"read_requests", w.requests},        {"io_wait_seconds", (double)w.io_wait_ns / 1e9},
          {"evictions", w.evictions},           {"lookups", lookups},
          {"read_retries", w.read_retries},     {"read_stalls", w.read_stalls},
          {"hits", hits},                       {"prefetch_issued", w.prefetch_issued},
          {"spec_predicted", w.spec_predicted}, {"spec_correct", w.spec_correct},
          {"weight_budget_bytes", w.budget_bytes}, {"arena_bytes", w.arena_bytes},
          {"resident_bytes", w.resident_bytes}, {"layers", layers}};
}

json stats_json(ServerContext& ctx) {
  json models = json::array();
  for (const auto& m : ctx.models) {
    const WeightStore& store = m->engine->model().weights();
    const ExpertParallel* ep = m->engine->model().expert_parallel();
    const EngineStats st = m->engine->stats();
    models.push_back({{"id", m->id},
                      {"engine", engine_json(st)},
                      {"weights", store.streaming() ? weights_json(store.stats_snapshot()) : json(nullptr)},
                      {"dist", ep ? expert_parallel_json(ep->stats(), st.generated_tokens) : json(nullptr)}});
  }
  const auto [rss, peak] = process_memory();
  json http = json::object();
  for (const auto& [status, n] : ctx.counters.snapshot()) http[std::to_string(status)] = n;
  json pipelines = nullptr;
  if (ctx.runner) {
    const agents::RunnerStats s = ctx.runner->stats();
    pipelines = {{"queued", s.queued},         {"running", s.running},           {"steps_done", s.steps_done},
                 {"steps_failed", s.steps_failed}, {"retries", s.retries}};
  }
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return {{"object", "stats"},
          {"time", now},
          {"uptime_seconds", now - (double)ctx.created},
          {"process", {{"rss_bytes", rss}, {"peak_rss_bytes", peak}}},
          {"mem_budget_bytes", ctx.options.mem_budget_bytes},
          {"models", models},
          {"pipelines", pipelines},
          {"http_responses", http}};
}

}  // namespace

json expert_parallel_json(const ExpertParallelStats& d, uint64_t tokens) {
  json ranks = json::array();
  for (const ExpertRankStats& r : d.rank)
    ranks.push_back({{"rank", r.rank},
                     {"host", r.host},
                     {"answers", r.answers},
                     {"bytes_read", r.bytes_read},
                     {"lookups", r.lookups},
                     {"hits", r.hits},
                     {"hit_rate", r.lookups ? json((double)r.hits / r.lookups) : json(nullptr)},
                     {"io_wait_seconds", r.io_wait_seconds},
                     {"compute_seconds", r.compute_seconds}});
  auto per_token = [&](double v) { return tokens ? json(v / tokens) : json(nullptr); };
  return {{"ranks", d.ranks},
          {"messages", d.messages},
          {"bytes_sent", d.bytes_sent},
          {"bytes_received", d.bytes_received},
          {"passes", d.passes},
          {"expert_jobs", d.jobs},
          {"expert_jobs_home", d.jobs_home},
          {"expert_jobs_moved", d.jobs_moved},
          {"wait_seconds", d.wait_seconds},
          {"network_seconds", d.network_seconds},
          {"tokens", tokens},
          {"wait_seconds_per_token", per_token(d.wait_seconds)},
          {"network_seconds_per_token", per_token(d.network_seconds)},
          {"bytes_per_token", per_token((double)(d.bytes_sent + d.bytes_received))},
          {"rank", ranks}};
}

void add_stats_routes(ServerContext& ctx) {
  ctx.http.Get("/v1/stats", guarded(ctx, [](ServerContext& c, const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(dump_json(stats_json(c)), "application/json");
  }));
}

}  // namespace spool::server
