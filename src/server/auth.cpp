// API-key checks; see auth.h.
#include "server/auth.h"

#include <arpa/inet.h>
#include <fstream>

#include "core/error.h"

namespace spool::server {

namespace {
std::string trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(a, b - a + 1));
}
}  // namespace

bool keys_equal(std::string_view given, std::string_view expected) {
  // Every byte of `expected` is visited; a length mismatch only sets a bit.
  volatile unsigned char diff = given.size() != expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? (unsigned char)given[i] : 0;
    diff = diff | (g ^ (unsigned char)expected[i]);
  }
  return diff == 0;
}

std::optional<std::string> bearer_token(std::string_view v) {
  const std::string_view scheme = "bearer ";
  if (v.size() < scheme.size()) return std::nullopt;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower((unsigned char)v[i]) != scheme[i]) return std::nullopt;
  std::string token = trim(v.substr(scheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::string read_api_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("--api-key-file: cannot read '" + path + "'");
  std::string line;
  std::getline(in, line);
  std::string key = trim(line);
  if (key.empty()) throw Error("--api-key-file: '" + path + "' holds no key on its first line");
  return key;
}

void check_bind_policy(const std::string& host, const std::string& api_key) {
  if (!is_loopback_host(host) && api_key.empty())
    throw Error("refusing to listen on " + host +
                " without an API key: other machines could use the server. Pass --api-key KEY or "
                "--api-key-file FILE, or bind 127.0.0.1");
}

}  // namespace spool::server
