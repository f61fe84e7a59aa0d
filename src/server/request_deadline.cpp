#include "server/request_deadline.h"

#include <cstdio>
#include <string>

namespace spool::server {

RequestDeadline::RequestDeadline(double seconds, Clock::time_point start)
    : seconds_(seconds > 0 ? seconds : 0),
      at_(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds_))) {}

bool RequestDeadline::passed(Clock::time_point now) const { return seconds_ > 0 && now >= at_; }

ApiError RequestDeadline::error() const {
  char s[32];
  std::snprintf(s, sizeof s, "%g", seconds_);
  return ApiError(504,
                  std::string("the request did not finish within the server's limit of ") + s +
                      " s (--request-timeout); it was cancelled",
                  "server_error", "request_timeout");
}

}  // namespace spool::server
