// An error the HTTP API reports to its client: an HTTP status and OpenAI's
// error object {"error": {"message", "type", "code", "param"}}. Request
// parsing and the handlers throw it; one place (the route wrapper in
// http_server.cpp) turns it into a response, so no bad request reaches the
// engine or takes the server down.
#pragma once

#include <stdexcept>
#include <string>

namespace spool::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type, std::string code = "", std::string param = "")
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)),
        param(std::move(param)) {}
  int status;
  std::string type;   // OpenAI's error types: invalid_request_error, authentication_error, ...
  std::string code;   // "" -> null
  std::string param;  // "" -> null
  int retry_after_s = 0;  // > 0: sent as a Retry-After header (queue full)
};

// 400 invalid_request_error about one request field.
inline ApiError bad_param(const std::string& param, const std::string& message,
                          const std::string& code = "invalid_value") {
  return ApiError(400, message, "invalid_request_error", code, param);
}

}  // namespace spool::server
