// GET /v1/stats: the server's own figures as one JSON object, for the web UI's
// engine page (Prometheus text at /metrics says the same for scrapers).
#pragma once

#include <nlohmann/json.hpp>

#include "model/expert_parallel.h"
#include "runtime/speculative.h"
#include "server/http_server.h"

namespace spool::server {

void add_stats_routes(ApiServer::Context& ctx);

// Expert parallelism's counters (--dist ep) as /v1/stats and --stats-json
// give them; `tokens` (generated so far, 0: unknown) adds per-token figures.
nlohmann::json expert_parallel_json(const ExpertParallelStats& d, uint64_t tokens = 0);

// Speculative decoding's counters and the governor's state (/v1/stats,
// --stats-json): mode, drafted / accepted tokens, acceptance rate, ...
nlohmann::json spec_stats_json(const SpecStats& s);

}  // namespace spool::server
