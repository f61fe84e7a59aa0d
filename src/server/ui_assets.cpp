// Serves the embedded web UI (ui_assets.h): GET / is ui/index.html, GET
// /ui/PATH any other file, gzipped (compressed at build time) when the client
// accepts it. Bodies go out through a sized content provider, which httplib
// does not compress again (its own per-request brotli at quality 11 costs
// ~150 ms for a 50 KB script). Every response carries a strong ETag (FNV-1a of
// the bytes) with `Cache-Control: no-cache`, so a browser revalidates and gets
// a 304 until the binary changes; the page carries a Content-Security-Policy
// that lets it load only its own scripts and styles and talk only to this
// server: model output shown in the page can neither run script nor fetch anything.
#include "server/ui_assets.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <unordered_map>

#include "server/server_context.h"

namespace spool::server {

namespace {

constexpr const char* kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct Served {
  const UiAsset* asset;
  std::string etag;
};

std::string fnv1a_etag(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"%016llx\"", (unsigned long long)h);
  return buf;
}

const std::unordered_map<std::string, Served>& assets() {
  static const std::unordered_map<std::string, Served> table = [] {
    std::unordered_map<std::string, Served> t;
    for (size_t i = 0; i < kUiAssetCount; ++i)
      t.emplace(kUiAssets[i].path, Served{&kUiAssets[i], fnv1a_etag(kUiAssets[i].data, kUiAssets[i].size)});
    return t;
  }();
  return table;
}

const char* content_type(std::string_view path) {
  const auto ends = [&](std::string_view suffix) { return path.ends_with(suffix); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js") || ends(".mjs")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".ico")) return "image/x-icon";
  if (ends(".json")) return "application/json";
  return "text/plain; charset=utf-8";  // licence files
}

void serve(const std::string& path, const httplib::Request& req, httplib::Response& res) {
  const auto it = assets().find(path);
  if (it == assets().end())
    throw ApiError(404, "no UI file '" + path + "'", "invalid_request_error", "not_found");
  const Served& s = it->second;
  const bool gzip = s.asset->gzip && req.get_header_value("Accept-Encoding").find("gzip") != std::string::npos;
  const std::string etag = gzip ? s.etag.substr(0, s.etag.size() - 1) + "-gz\"" : s.etag;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("ETag", etag);
  if (s.asset->gzip) res.set_header("Vary", "Accept-Encoding");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  if (path.ends_with(".html")) {
    res.set_header("Content-Security-Policy", kCsp);
    res.set_header("X-Frame-Options", "DENY");
  }
  if (req.get_header_value("If-None-Match") == etag) {
    res.status = 304;
    return;
  }
  const char* data = reinterpret_cast<const char*>(gzip ? s.asset->gzip : s.asset->data);
  const size_t size = gzip ? s.asset->gzip_size : s.asset->size;
  if (gzip) res.set_header("Content-Encoding", "gzip");
  res.set_content_provider(size, content_type(path), [data, size](size_t offset, size_t length, httplib::DataSink& sink) {
    return sink.write(data + offset, std::min(length, size - offset));
  });
}

}  // namespace

bool is_ui_path(const std::string& path) { return path == "/" || path.starts_with("/ui/"); }

void add_ui_routes(ServerContext& ctx) {
  ctx.http.Get("/", guarded(ctx, [](ServerContext&, const httplib::Request& req, httplib::Response& res) {
    serve("index.html", req, res);
  }));
  ctx.http.Get(R"(/ui/([A-Za-z0-9_.\-/]+))", guarded(ctx, [](ServerContext&, const httplib::Request& req, httplib::Response& res) {
    serve(req.matches[1].str(), req, res);
  }));
}

}  // namespace spool::server
