// GET /v1/stats: the server's own figures as one JSON object, for the web UI's
// engine page (Prometheus text at /metrics says the same for scrapers).
#pragma once

#include "server/http_server.h"

namespace spool::server {

void add_stats_routes(ApiServer::Context& ctx);

}  // namespace spool::server
