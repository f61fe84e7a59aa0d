// Host, Origin and Content-Type rules; see request_policy.h.
#include "server/request_policy.h"

#include <algorithm>
#include <cctype>

#include "server/auth.h"

namespace spool::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = (char)std::tolower((unsigned char)c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 5 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "host[:port]" of an origin or Host value, lower-cased, with the port kept ("" when malformed).
std::string authority(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.find_first_of("/?#@ \t\\") != std::string_view::npos) return "";
  if (!host_of_header(s)) return "";
  return lower(s);
}

}  // namespace

std::optional<std::string> host_of_header(std::string_view v) {
  v = trim(v);
  if (v.empty()) return std::nullopt;
  std::string_view host = v, port;
  if (v.front() == '[') {
    const size_t close = v.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = v.substr(0, close + 1);
    const std::string_view rest = v.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
      if (!all_digits(port)) return std::nullopt;
    }
  } else {
    const size_t colon = v.rfind(':');
    if (colon != std::string_view::npos) {
      host = v.substr(0, colon);
      port = v.substr(colon + 1);
      if (!all_digits(port) || host.find(':') != std::string_view::npos) return std::nullopt;
    }
  }
  if (host.empty()) return std::nullopt;
  for (char c : host)
    if (!(std::isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_' || c == '[' || c == ']' || c == ':'))
      return std::nullopt;
  std::string h = lower(host);
  if (h.size() > 1 && h.back() == '.') h.pop_back();  // "localhost." is localhost
  return h;
}

bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed) {
  const std::optional<std::string> host = host_of_header(host_header);
  if (!host) return false;
  if (is_loopback_host(*host)) return true;
  for (const std::string& a : allowed) {
    if (a == "*") return true;
    const std::optional<std::string> name = host_of_header(a);
    if (name && *name == *host) return true;
  }
  return false;
}

bool origin_is_own(std::string_view origin, std::string_view host_header) {
  origin = trim(origin);
  const std::string_view scheme = "http://";
  if (origin.size() <= scheme.size() || lower(origin.substr(0, scheme.size())) != scheme) return false;
  const std::string own = authority(host_header);
  return !own.empty() && authority(origin.substr(scheme.size())) == own;
}

bool origin_listed(std::string_view origin, const std::vector<std::string>& cors_origins) {
  const std::string o = lower(trim(origin));
  for (const std::string& c : cors_origins) {
    if (c == "*") return true;
    std::string l = lower(trim(c));
    while (!l.empty() && l.back() == '/') l.pop_back();
    if (!l.empty() && l == o) return true;
  }
  return false;
}

std::string media_type(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  return lower(trim(content_type.substr(0, semi)));
}

BodyTypes body_types_for(const std::string& method, const std::string& path) {
  if (method == "POST" && path == "/v1/files") return BodyTypes::JsonOrMultipart;
  if ((method == "POST" && path == "/v1/pipelines") || (method == "PUT" && path.rfind("/v1/pipeline-specs/", 0) == 0))
    return BodyTypes::JsonOrYaml;
  return BodyTypes::Json;
}

bool is_yaml_media_type(const std::string& media) {
  return media == "application/yaml" || media == "application/x-yaml" || media == "text/yaml";
}

bool body_type_accepted(const std::string& media, BodyTypes types) {
  if (media == "application/json") return true;
  switch (types) {
    case BodyTypes::Json: return false;
    case BodyTypes::JsonOrYaml: return is_yaml_media_type(media);
    case BodyTypes::JsonOrMultipart: return media == "multipart/form-data";
  }
  return false;
}

}  // namespace spool::server
