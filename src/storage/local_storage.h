// The local-file backend of Storage (storage/storage.h): O_DIRECT reads into
// the caller's aligned buffers, issued in parallel through io_uring, or pread
// + posix_fadvise(DONTNEED) where the file system cannot bypass its cache.
#pragma once

#include <memory>
#include <string>

#include "storage/storage.h"

namespace spool {

std::unique_ptr<Storage> open_local_storage(const std::string& path, const StorageOptions& options);

}  // namespace spool
