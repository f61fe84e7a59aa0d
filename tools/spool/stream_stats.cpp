// Run statistics: per-step deltas of the weight store's counters, JSON, progress line.
#include "stream_stats.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cli_common.h"
#include "core/error.h"
#include "server/stats_handler.h"

namespace spool::cli {

uint64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmHWM:") {
      uint64_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(f, rest);
  }
  return 0;
}

namespace {
uint64_t sum_hits(const StoreStats& s) {
  uint64_t n = 0;
  for (const auto& l : s.layers) n += l.hits;
  return n;
}
uint64_t sum_prefetched(const StoreStats& s) {
  uint64_t n = 0;
  for (const auto& l : s.layers) n += l.prefetched;
  return n;
}
uint64_t sum_misses(const StoreStats& s) {
  uint64_t n = 0;
  for (const auto& l : s.layers) n += l.misses;
  return n;
}
}  // namespace

StatsRecorder::StatsRecorder(Model& model) : model_(model) {
  tty_ = isatty(STDERR_FILENO);
  start_ = before_ = model_.weights().stats_snapshot();
  t_start_ = now_seconds();
}

void StatsRecorder::begin_step() {
  before_ = model_.weights().stats_snapshot();
  if (const ExpertParallel* ep = model_.expert_parallel()) dist_before_ = ep->stats();
  t_begin_ = now_seconds();
}

void StatsRecorder::end_step(const char* phase, int n_tokens) {
  const double wall = now_seconds() - t_begin_;
  const StoreStats now = model_.weights().stats_snapshot();
  const double io_wait = (now.io_wait_ns - before_.io_wait_ns) * 1e-9;
  const uint64_t lookups = now.lookups() - before_.lookups(), hits = sum_hits(now) - sum_hits(before_);
  total_tokens_ += n_tokens;
  steps_.push_back({{"phase", phase},
                    {"n_tokens", n_tokens},
                    {"wall_s", wall},
                    {"bytes_read", now.bytes_read - before_.bytes_read},
                    {"payload_bytes", now.payload_bytes - before_.payload_bytes},
                    {"requests", now.requests - before_.requests},
                    {"lookups", lookups},
                    {"hits", hits},
                    {"prefetched", sum_prefetched(now) - sum_prefetched(before_)},
                    {"misses", sum_misses(now) - sum_misses(before_)},
                    {"hit_rate", lookups ? (double)hits / lookups : 1.0},
                    {"evictions", now.evictions - before_.evictions},
                    {"io_wait_s", io_wait},
                    {"compute_s", std::max(0.0, wall - io_wait)},
                    {"peak_rss_bytes", peak_rss_bytes()}});
  if (const ExpertParallel* ep = model_.expert_parallel()) {  // --dist ep: this step's share of the traffic
    const ExpertParallelStats d = ep->stats();
    nlohmann::json& st = steps_.back();
    st["dist_messages"] = d.messages - dist_before_.messages;
    st["dist_bytes"] = d.bytes_sent + d.bytes_received - dist_before_.bytes_sent - dist_before_.bytes_received;
    st["dist_wait_s"] = d.wait_seconds - dist_before_.wait_seconds;
    st["dist_network_s"] = d.network_seconds - dist_before_.network_seconds;
  }
  if (tty_ && model_.weights().streaming()) {
    const double gb = (now.bytes_read - start_.bytes_read - (now.load_bytes - start_.load_bytes)) / 1e9;
    const double el = now_seconds() - t_start_;
    std::fprintf(stderr, "\r\033[K[spool] %llu tokens, %.2f tok/s, %.2f GB read, hit %.0f%%, io wait %.0f%% ",
                 (unsigned long long)total_tokens_, total_tokens_ / std::max(el, 1e-9), gb,
                 100.0 * (now.lookups() ? (double)sum_hits(now) / now.lookups() : 1.0),
                 100.0 * (now.io_wait_ns - start_.io_wait_ns) * 1e-9 / std::max(el, 1e-9));
    progressed_ = true;
  }
}

void StatsRecorder::end_progress() const {
  if (progressed_) std::fprintf(stderr, "\n");
}

nlohmann::json StatsRecorder::to_json(const nlohmann::json& extra) const {
  // Counters since the recorder was made (the resident set's load is before).
  StoreStats s = model_.weights().stats_snapshot();
  s.evictions -= start_.evictions;
  s.prefetch_issued -= start_.prefetch_issued;
  s.prefetch_dropped -= start_.prefetch_dropped;
  s.spec_predicted -= start_.spec_predicted;
  s.spec_correct -= start_.spec_correct;
  s.spec_routed -= start_.spec_routed;
  for (size_t l = 0; l < s.layers.size() && l < start_.layers.size(); ++l) {
    s.layers[l].hits -= start_.layers[l].hits;
    s.layers[l].prefetched -= start_.layers[l].prefetched;
    s.layers[l].inflight -= start_.layers[l].inflight;
    s.layers[l].misses -= start_.layers[l].misses;
  }
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerCacheStats& x = s.layers[l];
    if (x.lookups() == 0) continue;
    layers.push_back({{"layer", l + 1 == s.layers.size() ? -1 : (int)l},
                      {"hits", x.hits},
                      {"prefetched", x.prefetched},
                      {"inflight", x.inflight},
                      {"misses", x.misses},
                      {"hit_rate", (double)x.hits / x.lookups()}});
  }
  double wall = 0, io_wait = 0, decode_wall = 0;
  uint64_t bytes = 0, requests = 0, decode_tokens = 0, decode_bytes = 0, decode_payload = 0;
  for (const auto& st : steps_) {
    wall += st["wall_s"].get<double>();
    io_wait += st["io_wait_s"].get<double>();
    bytes += st["bytes_read"].get<uint64_t>();
    requests += st["requests"].get<uint64_t>();
    if (st["phase"] == "decode") {
      decode_tokens += st["n_tokens"].get<uint64_t>();
      decode_wall += st["wall_s"].get<double>();
      decode_bytes += st["bytes_read"].get<uint64_t>();
      decode_payload += st["payload_bytes"].get<uint64_t>();
    }
  }
  const uint64_t lookups = s.lookups(), hits = sum_hits(s);
  nlohmann::json j = {
      {"mode", model_.weights().mode()},
      {"store",
       {{"budget_bytes", s.budget_bytes},
        {"arena_bytes", s.arena_bytes},
        {"resident_bytes", s.resident_bytes},
        {"expert_slots", s.expert_slots},
        {"expert_slot_bytes", s.expert_slot_bytes},
        {"tensor_slots", s.tensor_slots},
        {"tensor_slot_bytes", s.tensor_slot_bytes},
        {"load_bytes", s.load_bytes}}},
      {"total",
       {{"tokens", total_tokens_},
        {"wall_s", wall},
        {"bytes_read", bytes},
        {"requests", requests},
        {"lookups", lookups},
        {"hits", hits},
        {"prefetched", sum_prefetched(s)},
        {"misses", sum_misses(s)},
        {"hit_rate", lookups ? (double)hits / lookups : 1.0},
        {"ready_rate", lookups ? (double)(hits + sum_prefetched(s)) / lookups : 1.0},
        {"evictions", s.evictions},
        {"prefetch_issued", s.prefetch_issued},
        {"prefetch_dropped", s.prefetch_dropped},
        {"verified_bytes", s.verified_bytes - start_.verified_bytes},
        {"verify_s", (s.verify_ns - start_.verify_ns) * 1e-9},
        {"io_wait_s", io_wait},
        {"compute_s", std::max(0.0, wall - io_wait)},
        {"decode_tokens", decode_tokens},
        {"decode_tok_s", decode_wall > 0 ? decode_tokens / decode_wall : 0.0},
        {"decode_bytes_per_token", decode_tokens ? (double)decode_bytes / decode_tokens : 0.0},
        {"decode_payload_bytes_per_token", decode_tokens ? (double)decode_payload / decode_tokens : 0.0},
        {"peak_rss_bytes", peak_rss_bytes()}}},
      {"speculative",
       {{"predicted", s.spec_predicted},
        {"routed", s.spec_routed},
        {"correct", s.spec_correct},
        {"accuracy", s.spec_routed ? (double)s.spec_correct / s.spec_routed : 0.0}}},
      {"per_layer", layers},
      {"per_token", steps_}};
  if (const ExpertParallel* ep = model_.expert_parallel()) {
    nlohmann::json d = server::expert_parallel_json(ep->stats());
    double wait = 0, net = 0;
    uint64_t dbytes = 0;
    for (const auto& st : steps_)
      if (st["phase"] == "decode") {
        wait += st["dist_wait_s"].get<double>();
        net += st["dist_network_s"].get<double>();
        dbytes += st["dist_bytes"].get<uint64_t>();
      }
    d["decode_wait_s_per_token"] = decode_tokens ? wait / decode_tokens : 0.0;
    d["decode_network_s_per_token"] = decode_tokens ? net / decode_tokens : 0.0;
    d["decode_bytes_per_token"] = decode_tokens ? (double)dbytes / decode_tokens : 0.0;
    d["decode_network_share"] = decode_wall > 0 ? net / decode_wall : 0.0;
    j["dist"] = d;
  }
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  return j;
}

void StatsRecorder::write_json(const std::string& path, const nlohmann::json& extra) const {
  std::ofstream out(path);
  if (!out) throw Error("cannot write --stats-json file '" + path + "'");
  out << to_json(extra).dump(2) << "\n";
  if (!out) throw Error("cannot write --stats-json file '" + path + "'");
}

}  // namespace spool::cli
