// pread- and mmap-based local file access.
#include "storage/local_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace spool {

namespace {
int open_checked(const std::string& path, uint64_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error("cannot stat '" + path + "': " + std::strerror(errno));
  }
  size = (uint64_t)st.st_size;
  return fd;
}
}  // namespace

LocalFile::LocalFile(const std::string& path) : path_(path) { fd_ = open_checked(path, size_); }
LocalFile::~LocalFile() { if (fd_ >= 0) ::close(fd_); }

void LocalFile::read(uint64_t offset, size_t n, void* dst) const {
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, out, n, (off_t)offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw Error("read of '" + path_ + "' at offset " + std::to_string(offset) + " failed: " +
                  (r < 0 ? std::strerror(errno) : "unexpected end of file"));
    out += r; n -= (size_t)r; offset += (uint64_t)r;
  }
}

MappedFile::MappedFile(const std::string& path) {
  const int fd = open_checked(path, size_);
  if (size_ > 0) {
    addr_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr_ == MAP_FAILED) {
      addr_ = nullptr;
      const int e = errno;
      ::close(fd);
      throw Error("cannot map '" + path + "': " + std::strerror(e));
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() { if (addr_) munmap(addr_, size_); }

void MappedFile::will_need(uint64_t offset, uint64_t n) const {
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  const uint64_t start = offset / page * page;
  if (start >= size_) return;
  n = std::min<uint64_t>(n + (offset - start), size_ - start);
  madvise(static_cast<uint8_t*>(addr_) + start, n, MADV_WILLNEED);
}

}  // namespace spool
