// Interim local backend of Storage: plain pread through LocalFile, requests
// served one after another, page cache used (direct() is false). It stands in
// until the O_DIRECT/io_uring backend (local_storage.cpp) lands; open_storage
// (storage.cpp) is the only caller.
#include <chrono>

#include "storage/local_file.h"
#include "storage/storage.h"

namespace spool {

namespace {

class PreadStorage final : public Storage {
 public:
  explicit PreadStorage(const std::string& path) : file_(path) {}
  const std::string& name() const override { return file_.path(); }
  uint64_t size() const override { return file_.size(); }
  bool direct() const override { return false; }
  size_t alignment() const override { return 1; }
  void read(std::span<const ReadRequest> reqs) override {
    const auto t0 = std::chrono::steady_clock::now();
    for (const ReadRequest& r : reqs) {
      file_.read(r.offset, r.n, r.dst);
      counters_.bytes += r.n;
      counters_.requests += 1;
    }
    counters_.wait_ns += (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - t0).count();
  }
  void read_unaligned(uint64_t offset, size_t n, void* dst) override {
    const ReadRequest r{offset, n, dst};
    read({&r, 1});
  }

 private:
  LocalFile file_;
};

}  // namespace

std::unique_ptr<Storage> open_pread_storage(const std::string& path, const StorageOptions&) {
  return std::make_unique<PreadStorage>(path);
}

}  // namespace spool
