// Which requests a local server answers at all, decided from the header before
// any body is read: the checks that keep web pages the user opens from using a
// server on 127.0.0.1 (docs/RELIABILITY.md "Threat model").
// - Host: without an API key, only loopback names (localhost, 127.0.0.0/8,
//   [::1], any port) and --allowed-host names: a DNS-rebinding page sends its
//   own name and gets 403.
// - Origin: a browser names the page that sent the request; only the server's
//   own origin and --cors-origin ones are answered (the others get 403), and
//   only those get CORS headers.
// - Content-Type: a body must say what it is (application/json, or what the
//   route also takes); anything else is 415, so a cross-site page cannot send
//   one without a CORS preflight, which the Origin check refuses.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spool::server {

// The host part of a Host header value ("h", "h:port", "[v6]:port"), lower-cased; nullopt when malformed.
std::optional<std::string> host_of_header(std::string_view host_header);

// Whether a Host header value may be answered: a loopback name or address, or
// one of `allowed` (names compared without port and case; "*" allows any).
bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed);

// The origin ("scheme://host[:port]") of a request, lower-cased, matched
// against the server's own (the Host header over http) and the CORS list
// ("*" allows any origin).
bool origin_is_own(std::string_view origin, std::string_view host_header);
bool origin_listed(std::string_view origin, const std::vector<std::string>& cors_origins);

// "type/subtype" of a Content-Type value, lower-cased, parameters dropped.
std::string media_type(std::string_view content_type);

// The media types a route takes a body in (besides application/json), by path.
enum class BodyTypes { Json, JsonOrYaml, JsonOrMultipart };
BodyTypes body_types_for(const std::string& method, const std::string& path);
// Whether `media` is a YAML media type spool reads (application/yaml, application/x-yaml, text/yaml).
bool is_yaml_media_type(const std::string& media);
// Whether a body of this media type is accepted on a route that takes `types`.
bool body_type_accepted(const std::string& media, BodyTypes types);

}  // namespace spool::server
