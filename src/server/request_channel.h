// The mailbox between the engine thread and one HTTP connection: the engine's
// callback pushes events (never blocks), the connection's thread waits for
// them. Held by shared_ptr from both sides, so either may go first.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "runtime/engine.h"

namespace spool::server {

class RequestChannel {
 public:
  void push(const RequestEvent& ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(ev);
    }
    cv_.notify_one();
  }

  // Takes the queued events, waiting up to `timeout` for at least one; may return none.
  std::vector<RequestEvent> wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    std::vector<RequestEvent> out;
    out.swap(events_);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RequestEvent> events_;
};

}  // namespace spool::server
