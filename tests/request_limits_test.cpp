// The server's request limits without a server: GuardedStream over a socket
// pair (header bytes, header lines, header deadline, the body after the header
// uncounted), the JSON depth check of parse_json_body, RequestDeadline. The
// same limits through a real `spool serve` are in tests/api/hostile_clients.test.mjs.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server/api_error.h"
#include "server/connection_guard.h"
#include "server/json_depth.h"
#include "server/request_deadline.h"
#include "server/server_context.h"

namespace spool::server {
namespace {

struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  void send(const std::string& s) const { ASSERT_EQ(::write(fd[1], s.data(), s.size()), (ssize_t)s.size()); }
};

// Reads everything the stream gives until it fails; returns the bytes read.
std::string drain(GuardedStream& s) {
  std::string out;
  char buf[512];
  for (ssize_t n; (n = s.read(buf, sizeof buf)) > 0;) out.append(buf, (size_t)n);
  return out;
}

ConnectionLimits small_limits() {
  ConnectionLimits l;
  l.max_header_bytes = 256;
  l.max_header_lines = 4;
  l.header_timeout_s = 1;
  l.read_timeout_s = 1;
  return l;
}

TEST(RequestLimits, HeaderWithinLimitsPassesAndTheBodyIsNotCounted) {
  SocketPair p;
  GuardedStream s(p.fd[0], small_limits());
  s.start_request();
  const std::string head = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n";
  p.send(head + std::string(1000, 'b'));  // the body is far over max_header_bytes
  shutdown(p.fd[1], SHUT_WR);
  EXPECT_EQ(drain(s).size(), head.size() + 1000);
  EXPECT_EQ(s.status(), 0);
}

TEST(RequestLimits, TooManyHeaderBytesOrLinesTrip431) {
  {
    SocketPair p;
    GuardedStream s(p.fd[0], small_limits());
    s.start_request();
    p.send("GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n");
    drain(s);
    EXPECT_EQ(s.status(), 431);
    char c;
    EXPECT_EQ(s.read(&c, 1), -1);
    EXPECT_EQ(s.write("x", 1), -1) << "nothing more is written once a limit tripped";
  }
  {
    SocketPair p;
    GuardedStream s(p.fd[0], small_limits());
    s.start_request();
    p.send("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n");  // 5 lines > 4
    drain(s);
    EXPECT_EQ(s.status(), 431);
  }
  {
    SocketPair p;
    GuardedStream s(p.fd[0], small_limits());
    s.start_request();
    p.send("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\n\r\n");  // exactly 4
    shutdown(p.fd[1], SHUT_WR);
    drain(s);
    EXPECT_EQ(s.status(), 0);
  }
}

TEST(RequestLimits, HeaderDeadlineTrips408EvenWhenEachReadIsQuick) {
  SocketPair p;
  ConnectionLimits l = small_limits();
  l.read_timeout_s = 5;  // each read alone would wait this long
  GuardedStream s(p.fd[0], l);
  s.start_request();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread trickle([&] {
    for (int i = 0; i < 8; ++i) {
      if (::send(p.fd[1], "X", 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  drain(s);
  const double s_taken = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  trickle.join();
  EXPECT_EQ(s.status(), 408);
  EXPECT_GE(s_taken, 0.9);
  EXPECT_LT(s_taken, 2.5);
}

TEST(RequestLimits, BodyDeadlineTrips408AfterTheHeader) {
  SocketPair p;
  ConnectionLimits l = small_limits();
  l.read_timeout_s = 5;
  l.body_timeout_s = 1;
  GuardedStream s(p.fd[0], l);
  s.start_request();
  p.send("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n");
  std::thread trickle([&] {
    for (int i = 0; i < 10; ++i) {
      if (::send(p.fd[1], "b", 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  drain(s);
  const double s_taken = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  trickle.join();
  EXPECT_EQ(s.status(), 408);
  EXPECT_TRUE(s.body_timed_out());
  EXPECT_GE(s_taken, 0.9);
  EXPECT_LT(s_taken, 2.5);
}

TEST(RequestLimits, RefusalIsAWholeResponse) {
  SocketPair p;
  std::thread t([&] { send_refusal(p.fd[0], 503, R"({"error":{}})", 1, 100); });
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(p.fd[1], buf, sizeof buf)) > 0;) got.append(buf, (size_t)n);
  t.join();
  EXPECT_EQ(got.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("Retry-After: 1\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
  EXPECT_EQ(got.substr(got.size() - 12), R"({"error":{}})");
}

TEST(RequestLimits, JsonDepthOver128IsRefusedBeforeParsing) {
  const auto body = [](int depth) {
    httplib::Request r;
    r.body = "{\"a\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
    return r;
  };
  EXPECT_NO_THROW(parse_json_body(body(128)));
  try {
    parse_json_body(body(129));
    ADD_FAILURE() << "129 levels parsed";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "json_too_deep");
  }
  httplib::Request in_string;
  in_string.body = "{\"a\":\"" + std::string(1000, '[') + "\\\"{{{\"}";  // brackets and an escaped quote in a string
  EXPECT_NO_THROW(parse_json_body(in_string));
}

TEST(RequestLimits, JsonDepthScan) {
  EXPECT_EQ(json_depth_exceeded_at("[[[]]]", 3), std::string_view::npos);
  EXPECT_EQ(json_depth_exceeded_at("[[[[]]]]", 3), 3u);
  EXPECT_EQ(json_depth_exceeded_at("{\"a\":{\"b\":[{}]}}", 3), 11u);
  EXPECT_EQ(json_depth_exceeded_at("[\"[[[[\\\"[[[[\"]", 2), std::string_view::npos);  // inside a string
  EXPECT_EQ(json_depth_exceeded_at("]]]][[[[", 3), 7u);  // stray closers do not buy depth
}

TEST(RequestLimits, DeadlinePassesAndNamesItsLimit) {
  using Clock = RequestDeadline::Clock;
  const auto t0 = Clock::now();
  const RequestDeadline none(0, t0);
  EXPECT_FALSE(none.passed(t0 + std::chrono::hours(1000)));
  const RequestDeadline d(1.5, t0);
  EXPECT_FALSE(d.passed(t0 + std::chrono::milliseconds(1499)));
  EXPECT_TRUE(d.passed(t0 + std::chrono::milliseconds(1500)));
  const ApiError e = d.error();
  EXPECT_EQ(e.status, 504);
  EXPECT_EQ(e.code, "request_timeout");
  EXPECT_NE(std::string(e.what()).find("1.5 s"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace spool::server
