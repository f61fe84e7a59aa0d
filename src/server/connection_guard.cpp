// Bounded connections, request headers and time for httplib's server
// (connection_guard.h says why and what).
#include "server/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#ifndef POLLRDHUP  // Linux only: elsewhere a peer's close shows as readable with nothing to read
#define POLLRDHUP 0
#endif

namespace spool::server {

namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `ms` (negative: 0) for `events` on the socket; > 0 when ready, 0 on timeout, < 0 on error.
int wait_socket(int sock, short events, long ms) {
  pollfd p{sock, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, (int)std::max(0L, ms));
  } while (r < 0 && errno == EINTR);
  return r;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

void ip_and_port(const sockaddr_storage& addr, std::string& ip, int& port) {
  char host[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  ip = host;
}

// Set by a handler on the connection's worker thread: close after this response.
thread_local bool tl_close_after_response = false;

// The socket of the connection this worker thread serves (-1: none).
thread_local int tl_socket = -1;

// Set on the accepting thread while ConnectionPool hands it a connection to refuse.
thread_local bool tl_refusing = false;

}  // namespace

// ---- GuardedStream ----

void GuardedStream::start_request() {
  in_header_ = true;
  header_bytes_ = 0;
  body_bytes_ = 0;
  header_lines_ = 0;
  tail_ = 0;
  status_ = 0;
  header_failed_ = false;
  deadline_ = Clock::now() + std::chrono::seconds(limits_.header_timeout_s);
}

bool GuardedStream::is_readable() const {
  if (status_ != 0) return false;
  return pos_ < len_ || wait_socket(sock_, POLLIN, limits_.read_timeout_s * 1000L) > 0;
}

bool GuardedStream::is_writable() const {
  if (status_ != 0) return false;
  if (wait_socket(sock_, POLLOUT, limits_.write_timeout_s * 1000L) <= 0) return false;
  // Alive unless the peer closed: readable with nothing to peek means EOF.
  if (wait_socket(sock_, POLLIN, 0) <= 0) return true;
  char c;
  return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

bool GuardedStream::fill() {
  long wait_ms = limits_.read_timeout_s * 1000L;
  bool deadline_first = false;
  const long left = (long)std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
  if (left < wait_ms) wait_ms = left, deadline_first = true;
  if (wait_socket(sock_, POLLIN, wait_ms) <= 0) {
    if (deadline_first) status_ = 408;
    header_failed_ = in_header_;
    return false;
  }
  ssize_t n;
  do {
    n = ::recv(sock_, buf_, sizeof buf_, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    header_failed_ = in_header_;
    return false;
  }
  pos_ = 0;
  len_ = (size_t)n;
  return true;
}

ssize_t GuardedStream::read(char* ptr, size_t size) {
  if (status_ != 0) return -1;
  if (pos_ == len_ && !fill()) return -1;
  size_t n = std::min(size, len_ - pos_);
  size_t header_part = 0;  // of these n bytes
  if (in_header_) {
    // Count up to the end of the header; the bytes after it are the body's.
    header_part = n;
    for (size_t i = 0; i < n; ++i) {
      const unsigned char c = (unsigned char)buf_[pos_ + i];
      tail_ = (tail_ << 8) | c;
      if (++header_bytes_ > limits_.max_header_bytes) break;
      if (c == '\n') {
        if (tail_ == 0x0d0a0d0a || (tail_ & 0xffff) == 0x0a0a) {  // blank line: the header is complete
          in_header_ = false;
          header_part = i + 1;
          deadline_ = Clock::now() + std::chrono::seconds(limits_.body_timeout_s);
          break;
        }
        if (++header_lines_ > limits_.max_header_lines + 1) break;  // the request line is line 1
      }
    }
    if (in_header_ && (header_bytes_ > limits_.max_header_bytes || header_lines_ > limits_.max_header_lines + 1)) {
      status_ = 431;
      header_failed_ = true;
      return -1;
    }
  }
  if (!in_header_) {
    // Whatever the framing (chunked, compressed), the body's wire bytes are bounded here.
    body_bytes_ += n - header_part;
    if (body_bytes_ > limits_.max_body_wire_bytes()) {
      status_ = 413;
      return -1;
    }
  }
  std::copy(buf_ + pos_, buf_ + pos_ + n, ptr);
  pos_ += n;
  return (ssize_t)n;
}

ssize_t GuardedStream::write(const char* ptr, size_t size) {
  if (status_ != 0) return -1;
  if (wait_socket(sock_, POLLOUT, limits_.write_timeout_s * 1000L) <= 0) return -1;
  ssize_t n;
  do {
    n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

void GuardedStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, ip, port);
}

void GuardedStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, ip, port);
}

void send_refusal(int sock, int status, const std::string& json_body, int retry_after_s, int drain_ms) {
  std::string msg = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                    "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(json_body.size()) +
                    "\r\nConnection: close\r\n";
  if (retry_after_s > 0) msg += "Retry-After: " + std::to_string(retry_after_s) + "\r\n";
  msg += "\r\n" + json_body;
  const auto end = Clock::now() + std::chrono::milliseconds(drain_ms);
  const auto left_ms = [&] {
    return (long)std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
  };
  for (size_t off = 0; off < msg.size();) {
    if (wait_socket(sock, POLLOUT, left_ms()) <= 0) return;
    const ssize_t n = ::send(sock, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += (size_t)n;
  }
  ::shutdown(sock, SHUT_WR);
  char sink[4096];
  while (wait_socket(sock, POLLIN, left_ms()) > 0) {
    const ssize_t n = ::recv(sock, sink, sizeof sink, 0);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
}

// ---- ConnectionPool ----

ConnectionPool::ConnectionPool(size_t workers) {
  for (size_t i = 0; i < workers; ++i) workers_.push_back(std::make_unique<Worker>());
  idle_.reserve(workers);
  for (auto& w : workers_) threads_.emplace_back([this, w = w.get()] { work(w); });
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_ && busy_ < workers_.size()) {
      ++busy_;
      if (idle_.empty()) {
        pending_.push_back(std::move(fn));  // a worker not waiting yet (starting, or finishing a connection)
        return;
      }
      Worker* w = idle_.back();
      idle_.pop_back();
      w->job = std::move(fn);
      w->has_job = true;
      w->cv.notify_one();
      return;
    }
  }
  // Every worker is taken: the job (httplib's "serve this socket") runs here,
  // on the accepting thread, and only hands its socket to the refuser.
  tl_refusing = true;
  fn();
  tl_refusing = false;
}

void ConnectionPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && threads_.empty()) return;
    stop_ = true;
    for (auto& w : workers_) w->cv.notify_one();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void ConnectionPool::work(Worker* w) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::function<void()> fn;
    if (!pending_.empty()) {
      fn = std::move(pending_.front());
      pending_.pop_front();
    } else {
      if (stop_) return;
      idle_.push_back(w);
      w->cv.wait(lock, [&] { return stop_ || w->has_job; });
      if (!w->has_job) return;  // stopping (it stays in idle_, which no one reads any more)
      fn = std::move(w->job);
      w->has_job = false;
    }
    lock.unlock();
    fn();
    fn = nullptr;
    lock.lock();
    --busy_;
  }
}

// ---- GuardedHttpServer ----

GuardedHttpServer::GuardedHttpServer() : refuser_([this] { refuser_loop(); }) {}

GuardedHttpServer::~GuardedHttpServer() {
  {
    std::lock_guard<std::mutex> lock(refuse_mu_);
    refuser_stop_ = true;
  }
  refuse_cv_.notify_all();
  refuser_.join();
}

void GuardedHttpServer::refuse_later(int sock) {
  {
    std::lock_guard<std::mutex> lock(refuse_mu_);
    if (!refuser_stop_ && to_refuse_.size() < 256) {
      to_refuse_.push_back(sock);
      refuse_cv_.notify_one();
      return;
    }
  }
  ::close(sock);  // a flood beyond what the refuser keeps up with: closed unanswered
}

void GuardedHttpServer::refuser_loop() {
  for (;;) {
    int sock;
    {
      std::unique_lock<std::mutex> lock(refuse_mu_);
      refuse_cv_.wait(lock, [&] { return refuser_stop_ || !to_refuse_.empty(); });
      if (to_refuse_.empty()) return;
      sock = to_refuse_.front();
      to_refuse_.pop_front();
    }
    send_refusal(sock, 503, refusal_body ? refusal_body(503, false) : "{}", 1, 200);
    ::close(sock);
    if (on_refusal) on_refusal(503);
  }
}

bool GuardedHttpServer::wait_for_request(int sock) {
  const auto end = Clock::now() + std::chrono::seconds(limits_.keep_alive_timeout_s);
  while (svr_sock_ != INVALID_SOCKET) {
    const long left = (long)std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return false;
    const int r = wait_socket(sock, POLLIN, std::min(left, 100L));
    if (r != 0) return r > 0;
  }
  return false;
}

void GuardedHttpServer::close_after_response() { tl_close_after_response = true; }

bool GuardedHttpServer::client_gone() {
  if (tl_socket < 0) return false;
  pollfd p{tl_socket, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  char c;
  // Readable: either more bytes from the client (it is still there) or EOF.
  const ssize_t n = ::recv(tl_socket, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

httplib::Server::HandlerWithContentReader GuardedHttpServer::read_body_then(Handler handler) {
  return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                              const httplib::ContentReader& reader) {
    const size_t max = limits_.max_body_bytes;
    const auto refuse = [&](int status, const std::string& why) {
      close_after_response();  // what is left of the body must not be read as the next request
      if (body_error) body_error(res, status, why);
      else res.status = status;
    };
    if (req.has_header("Content-Length") && req.get_header_value<uint64_t>("Content-Length") > max)
      return refuse(413, "");  // refused before reading a byte of it
    // httplib's own reading sets Request::body and files; here the reader's
    // output goes into the same fields, counted as it is decoded.
    auto& r = const_cast<httplib::Request&>(req);
    size_t total = 0;
    bool over = false;
    const auto count = [&](size_t n) {
      total += n;
      over = over || total > max;
      return !over;
    };
    bool ok;
    if (req.is_multipart_form_data()) {
      std::vector<httplib::MultipartFormData> parts;
      ok = reader(
          [&](const httplib::MultipartFormData& part) {
            parts.push_back(part);
            return count(part.name.size() + part.filename.size() + part.content_type.size());
          },
          [&](const char* data, size_t n) {
            if (!count(n) || parts.empty()) return false;
            parts.back().content.append(data, n);
            return true;
          });
      for (httplib::MultipartFormData& p : parts) r.files.emplace(p.name, std::move(p));
    } else {
      ok = reader([&](const char* data, size_t n) {
        if (!count(n)) return false;
        r.body.append(data, n);
        return true;
      });
    }
    if (over) return refuse(413, "");
    if (!ok) {
      const int status = res.status == 415 ? 415 : 400;  // httplib's 415: a Content-Encoding it cannot decode
      return refuse(status, status == 415 ? "the request body's Content-Encoding is not supported (send it "
                                            "uncompressed, or as gzip or deflate)"
                                          : "the request body could not be read: its chunked framing, multipart "
                                            "form or compressed data is malformed, or it ended early");
    }
    res.status = -1;  // as httplib leaves it for a handler
    handler(req, res);
  };
}

GuardedHttpServer& GuardedHttpServer::Post(const std::string& pattern, Handler handler) {
  httplib::Server::Post(pattern, read_body_then(std::move(handler)));
  return *this;
}

GuardedHttpServer& GuardedHttpServer::Put(const std::string& pattern, Handler handler) {
  httplib::Server::Put(pattern, read_body_then(std::move(handler)));
  return *this;
}

bool GuardedHttpServer::process_and_close_socket(int sock) {
  if (tl_refusing) {
    refuse_later(sock);
    return false;
  }
  bool ret = false;
  for (size_t left = limits_.keep_alive_max_requests; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    if (!wait_for_request(sock)) break;
    // A stream per request, as httplib does: what a request left unread in the
    // buffer (a body a 401 did not need) is dropped with it.
    GuardedStream strm(sock, limits_);
    strm.start_request();
    tl_socket = sock;
    bool closed = false;
    tl_close_after_response = false;
    ret = process_request(strm, left == 1, closed, nullptr);
    if (tl_close_after_response) closed = true;
    if (strm.status() != 0) {
      const int status = strm.status();
      send_refusal(sock, status, refusal_body ? refusal_body(status, strm.body_timed_out()) : "{}", 0, 500);
      if (on_refusal) on_refusal(status);
      ret = false;
      break;
    }
    // After a header that never completed (httplib answered 400), nothing good follows on this connection.
    if (!ret || closed || strm.header_failed()) break;
  }
  tl_socket = -1;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace spool::server
