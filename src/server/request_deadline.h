// A whole-request deadline (`spool serve --request-timeout`): a completion
// still unfinished this long after it arrived is cancelled by its connection's
// thread (which polls its events every 100 ms anyway), so its KV blocks go back
// to the pool, and the client gets a 504 error with code request_timeout
// (streamed: an error event, as for an engine failure).
#pragma once

#include <chrono>

#include "server/api_error.h"

namespace spool::server {

class RequestDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  // seconds <= 0: no deadline.
  explicit RequestDeadline(double seconds = 0, Clock::time_point start = Clock::now());
  bool passed(Clock::time_point now = Clock::now()) const;
  double seconds() const { return seconds_; }
  // The error a request past its deadline gets.
  ApiError error() const;

 private:
  double seconds_;
  Clock::time_point at_;
};

}  // namespace spool::server
