// API-key authentication: `Authorization: Bearer KEY` compared in constant
// time, the key read from a file, and the rule that a server reachable from
// other machines (any address but loopback) must have a key.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace spool::server {

// True when `given` equals `expected`. The time taken depends only on the
// length of `expected`, never on where the strings first differ.
bool keys_equal(std::string_view given, std::string_view expected);

// The token of an "Authorization: Bearer TOKEN" header value (scheme
// case-insensitive), or nullopt.
std::optional<std::string> bearer_token(std::string_view header_value);

// 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// The first line of the file, surrounding whitespace removed; throws
// spool::Error if it cannot be read or holds no key.
std::string read_api_key_file(const std::string& path);

// Throws spool::Error with a clear message when `host` is not loopback and no key is set.
void check_bind_policy(const std::string& host, const std::string& api_key);

}  // namespace spool::server
