// Storage backend selection: http:// and https:// URLs go to the HTTP Range
// backend (http_storage.cpp), local paths to the local-file backend
// (local_storage.cpp).
#include "storage/storage.h"

#include "storage/http_storage.h"
#include "storage/local_storage.h"

namespace spool {

bool is_url(const std::string& s) { return s.starts_with("http://") || s.starts_with("https://"); }

std::unique_ptr<Storage> open_storage(const std::string& path_or_url, const StorageOptions& options) {
  if (is_url(path_or_url)) return std::make_unique<HttpStorage>(path_or_url, options);
  return open_local_storage(path_or_url, options);
}

}  // namespace spool
