// The server's connection handling, in place of httplib's own: bounded
// connections, request headers and time.
//
// httplib (0.11, as Debian packages it, compiled) reads a request header with
// no bound on its total size or on the time it may take (its read timeout is
// per read), and queues connections past its thread count without end. Here:
// - GuardedHttpServer reads each request through a GuardedStream, which counts
//   the request line and header bytes and lines and gives them a deadline; past
//   --max-header-bytes / --max-headers the client gets 431, past
//   --header-timeout 408, then the connection closes.
// - ConnectionPool (its task queue) serves at most `workers` connections at a
//   time; one more is answered 503 with Retry-After by a small refuser thread
//   and closed, so a flood of connections gets a quick, bounded answer instead of
//   an ever longer wait.
// - Request bodies: httplib 0.11 bounds only a Content-Length body by its
//   payload limit; a chunked or gzip-encoded one grows without end. Post/Put
//   here register the handler behind a content reader that stops at
//   max_body_bytes of decoded bytes (413, connection closed), and the stream
//   refuses more than max_body_wire_bytes of body on the wire, so no framing
//   buffers more than about the limit.
// Everything else (routes, responses) is httplib's process_request as before.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace spool::server {

struct ConnectionLimits {
  size_t max_header_bytes = 32u << 10;  // request line + header lines, CRLFs included
  int max_header_lines = 100;           // header lines (not the request line)
  int header_timeout_s = 10;            // the whole request line + header, from its first byte
  int body_timeout_s = 60;              // the whole body, from the end of the header
  int read_timeout_s = 5;               // any one read (header or body)
  int write_timeout_s = 5;
  // An idle connection waits this long for its next request; responses advertise
  // the shorter keep_alive_advertised_s (Keep-Alive: timeout=...). Clients close
  // idle sockets before the advertised time (node's fetch 1 s before it); the
  // margin covers a client whose event loop stalls a few seconds, which would
  // otherwise send a request on a socket the server just closed ("other side
  // closed": the soak saw one in 28 000 requests on the loaded dev machine).
  int keep_alive_timeout_s = 6;
  int keep_alive_advertised_s = 2;
  size_t keep_alive_max_requests = 100; // then it closes
  size_t max_body_bytes = 8u << 20;     // a request body after decoding (chunked, gzip)
  // The body's bytes on the wire (chunk framing included); past it the stream
  // fails and the client gets 413. Above max_body_bytes to leave room for framing.
  size_t max_body_wire_bytes() const { return max_body_bytes + max_body_bytes / 4 + (64u << 10); }
};

// A plain socket stream with a read buffer that, until the blank line ending a
// request's header, counts bytes and lines and honours a deadline. Once a limit
// trips, reads and writes fail and status() says which answer is owed.
class GuardedStream : public httplib::Stream {
 public:
  GuardedStream(int sock, const ConnectionLimits& limits) : sock_(sock), limits_(limits) {}
  // Before each request: header accounting starts again, the deadline from now.
  void start_request();
  // 0: fine; 431 or 408 once a header limit tripped, 408 once the body's deadline passed,
  // 413 once the body passed max_body_wire_bytes.
  int status() const { return status_; }
  bool body_timed_out() const { return status_ == 408 && !in_header_; }
  // The header ended early: a read timed out, the peer closed, or a limit tripped.
  bool header_failed() const { return header_failed_; }
  bool buffered() const { return pos_ < len_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return sock_; }

 private:
  bool fill();  // reads more into buf_ (pos_ == len_); false on timeout, EOF, error or a tripped limit

  int sock_;
  ConnectionLimits limits_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  bool in_header_ = true;
  size_t header_bytes_ = 0;
  size_t body_bytes_ = 0;  // read after the header
  int header_lines_ = 0;
  uint32_t tail_ = 0;  // last 4 header bytes, for the blank line
  std::chrono::steady_clock::time_point deadline_{};
  int status_ = 0;
  bool header_failed_ = false;
};

// Writes a whole small response (status line, JSON body, Connection: close),
// then half-closes and drains what the client still sends for up to
// `drain_ms`, so that closing does not reset the connection before the client
// read the answer. Does not close the socket.
void send_refusal(int sock, int status, const std::string& json_body, int retry_after_s, int drain_ms);

// httplib's task queue with a fixed number of workers and no waiting line: a
// connection that finds every worker busy is handed to the refuser (503). The
// worker idle the shortest time takes the next connection (a stack, not a
// queue), so the threads a server touches, and the memory their stacks and
// malloc caches keep, follow the connections it has at once rather than
// --max-connections (a queue handed work round-robin to all 256 over time: the
// soak saw RSS climb for minutes).
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t workers);
  ~ConnectionPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  struct Worker {
    std::condition_variable cv;
    std::function<void()> job;
    bool has_job = false;
  };
  void work(Worker* w);
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // most recently idle last
  // Connections taken but not yet handed to a worker: one whose thread is
  // between two connections (or not started yet) takes them first.
  std::deque<std::function<void()>> pending_;
  size_t busy_ = 0;  // connections taken and not finished (at most workers_.size())
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class GuardedHttpServer : public httplib::Server {
 public:
  GuardedHttpServer();
  ~GuardedHttpServer() override;

  // Before listening. The keep-alive and timeout settings of httplib::Server
  // are replaced by these.
  void set_limits(const ConnectionLimits& limits) {
    limits_ = limits;
    // httplib still writes these into each response's Keep-Alive header.
    set_keep_alive_max_count(limits.keep_alive_max_requests);
    set_keep_alive_timeout(limits.keep_alive_advertised_s);
  }
  const ConnectionLimits& limits() const { return limits_; }
  // The JSON body for an answer the guard writes itself (431, 408, 503), and a
  // hook told of each such answer (metrics).
  // `in_body`: a 408 for the body's deadline rather than the header's.
  std::function<std::string(int status, bool in_body)> refusal_body;
  std::function<void(int status)> on_refusal;

  // Called by ConnectionPool on the accepting thread when every worker is busy.
  void refuse_later(int sock);
  // From a handler: close this connection once the response is written (a
  // request answered before its body was read, e.g. a 401, would otherwise
  // leave that body to be parsed as the next request).
  static void close_after_response();
  // From a handler: whether the client of this worker's connection has closed
  // it (EOF or reset seen without reading what it may still send).
  static bool client_gone();

  // httplib's Post/Put, hidden: the handler runs after the body has been read
  // into req.body (multipart parts into req.files) through a content reader
  // that counts decoded bytes. A body over max_body_bytes, or one that cannot
  // be read (bad chunk framing, corrupt gzip, unknown Content-Encoding), is
  // answered through body_error and the connection closed. Call these through
  // a GuardedHttpServer&, not an httplib::Server&.
  GuardedHttpServer& Post(const std::string& pattern, Handler handler);
  GuardedHttpServer& Put(const std::string& pattern, Handler handler);
  // Writes the error response for a body refused with `status` (413, 400, 415).
  std::function<void(httplib::Response& res, int status, const std::string& why)> body_error;

 private:
  bool process_and_close_socket(int sock) override;
  HandlerWithContentReader read_body_then(Handler handler);
  void refuser_loop();
  bool wait_for_request(int sock);

  ConnectionLimits limits_;
  std::mutex refuse_mu_;
  std::condition_variable refuse_cv_;
  std::deque<int> to_refuse_;
  bool refuser_stop_ = false;
  std::thread refuser_;
};

}  // namespace spool::server
