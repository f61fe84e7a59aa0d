// Storage backend selection: http:// and https:// URLs go to the HTTP Range
// backend (http_storage.cpp), local paths to the local-file backend
// (local_storage.cpp); either wrapped in fault injection when
// SPOOL_STORAGE_FAULTS says so (fault_storage.cpp).
#include "storage/storage.h"

#include "storage/fault_storage.h"
#include "storage/http_storage.h"
#include "storage/local_storage.h"

namespace spool {

bool is_url(const std::string& s) { return s.starts_with("http://") || s.starts_with("https://"); }

std::unique_ptr<Storage> open_storage(const std::string& path_or_url, const StorageOptions& options) {
  std::unique_ptr<Storage> s;
  if (is_url(path_or_url)) s = std::make_unique<HttpStorage>(path_or_url, options);
  else s = open_local_storage(path_or_url, options);
  const std::vector<FaultRule> faults = env_fault_rules();  // SPOOL_STORAGE_FAULTS (storage/fault_storage.h)
  return faults.empty() ? std::move(s) : with_faults(std::move(s), faults);
}

}  // namespace spool
