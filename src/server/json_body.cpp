// The JSON body of a request, parsed once for every route (a parser of outside
// data on its own, so the fuzzer reaches it without the rest of the server).
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_depth.h"
#include "server/server_context.h"

namespace spool::server {

using nlohmann::json;

size_t json_depth_exceeded_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

namespace {

// nlohmann's parser does not recurse, but what walks a parsed value does.
void check_depth(const std::string& text) {
  const size_t at = json_depth_exceeded_at(text);
  if (at != std::string_view::npos)
    throw ApiError(400,
                   "the request body is nested deeper than " + std::to_string(kMaxJsonDepth) +
                       " arrays/objects (at byte " + std::to_string(at) + ")",
                   "invalid_request_error", "json_too_deep");
}

}  // namespace

json parse_json_body(const httplib::Request& req) {
  check_depth(req.body);
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
