// Local file access for model weights: positional reads (pread, retried on
// short reads and EINTR) and read-only memory maps. The weight store decides
// what to read; this layer only moves bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace spool {

class LocalFile {
 public:
  explicit LocalFile(const std::string& path);
  ~LocalFile();
  LocalFile(const LocalFile&) = delete;
  LocalFile& operator=(const LocalFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads exactly n bytes at offset into dst; throws spool::Error on failure.
  void read(uint64_t offset, size_t n, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A read-only private mapping of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
  uint64_t size() const { return size_; }
  // Asks the kernel to read [offset, offset+n) ahead (readahead into the page cache).
  void will_need(uint64_t offset, uint64_t n) const;

 private:
  void* addr_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace spool
