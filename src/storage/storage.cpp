// Storage backend selection: local paths and (when built) HTTP(S) URLs.
#include "storage/storage.h"

#include "core/error.h"
#include "storage/local_storage.h"

namespace spool {

bool is_url(const std::string& s) { return s.starts_with("http://") || s.starts_with("https://"); }

std::unique_ptr<Storage> open_storage(const std::string& path_or_url, const StorageOptions& options) {
  if (is_url(path_or_url))
    throw Error("'" + path_or_url + "': HTTP backend not built (this build reads local files only)");
  return open_local_storage(path_or_url, options);
}

}  // namespace spool
