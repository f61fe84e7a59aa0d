// The JSON body of a request, parsed once for every route (a parser of outside
// data on its own, so the fuzzer reaches it without the rest of the server).
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/server_context.h"

namespace spool::server {

using nlohmann::json;

json parse_json_body(const httplib::Request& req) {
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "invalid_request_error",
                   "invalid_json");
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "invalid_request_error", "invalid_json");
  return body;
}

}  // namespace spool::server
