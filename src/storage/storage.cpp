// open_storage: picks the Storage backend for a path or URL.
#include "storage/storage.h"

#include "storage/http_storage.h"

namespace spool {

std::unique_ptr<Storage> open_pread_storage(const std::string& path, const StorageOptions& options);  // pread_storage.cpp

bool is_url(const std::string& s) { return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0; }

std::unique_ptr<Storage> open_storage(const std::string& path_or_url, const StorageOptions& options) {
  if (is_url(path_or_url)) return std::make_unique<HttpStorage>(path_or_url, options);
  return open_pread_storage(path_or_url, options);
}

}  // namespace spool
