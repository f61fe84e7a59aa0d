// Local files as a Storage: O_DIRECT reads (page cache bypassed, so a memory
// budget is the whole truth) submitted in parallel through io_uring at the
// configured queue depth; where the file system does not report direct-I/O
// alignment (tmpfs, some FUSE/overlay mounts) or refuses O_DIRECT, buffered
// reads followed by posix_fadvise(DONTNEED) so the pages do not stay cached.
// Rings are pooled: a read() borrows one (creating it if none is free), so
// several threads read at once without sharing a submission queue.
#include "storage/local_storage.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace spool {
namespace {

constexpr size_t kChunk = 1u << 20;  // largest single request: 1 MiB (what saturates the disks we measured)

uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

class LocalStorage final : public Storage {
 public:
  LocalStorage(const std::string& path, const StorageOptions& o) : path_(path), options_(o) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st{};
    if (fstat(fd_, &st) != 0) {
      const int e = errno;
      ::close(fd_);
      throw Error("cannot stat '" + path + "': " + std::strerror(e));
    }
    size_ = (uint64_t)st.st_size;
    if (o.direct) open_direct();
    if (options_.queue_depth < 1) options_.queue_depth = 1;
  }

  ~LocalStorage() override {
    for (auto& r : rings_) io_uring_queue_exit(r.get());
    if (dfd_ >= 0) ::close(dfd_);
    if (fd_ >= 0) ::close(fd_);
  }

  const std::string& name() const override { return path_; }
  uint64_t size() const override { return size_; }
  bool direct() const override { return dfd_ >= 0; }
  size_t alignment() const override { return dfd_ >= 0 ? align_ : 1; }

  void read(std::span<const ReadRequest> reqs) override {
    const uint64_t t0 = now_ns();
    struct Piece { uint64_t offset; size_t n; uint8_t* dst; };
    std::vector<Piece> todo;
    for (const ReadRequest& r : reqs) {
      check_request(r);
      for (size_t done = 0; done < r.n; done += kChunk)
        todo.push_back({r.offset + done, std::min(kChunk, r.n - done), static_cast<uint8_t*>(r.dst) + done});
    }
    const int fd = dfd_ >= 0 ? dfd_ : fd_;
    io_uring* ring = todo.size() > 1 ? borrow_ring() : nullptr;
    try {
      if (!ring) {
        for (const Piece& p : todo) pread_all(fd, p.offset, p.n, p.dst);
      } else {
        // Pieces are submitted up to the queue depth (user data: the index of
        // its in-flight slot); a short read is resubmitted for its remainder.
        const size_t qd = (size_t)options_.queue_depth;
        std::vector<Piece> slot(qd);
        std::vector<size_t> free_slots;
        for (size_t i = qd; i-- > 0;) free_slots.push_back(i);
        size_t next = 0, inflight = 0;
        std::vector<Piece> retry;
        while (next < todo.size() || !retry.empty() || inflight > 0) {
          bool queued = false;
          while (!free_slots.empty() && (!retry.empty() || next < todo.size())) {
            io_uring_sqe* sqe = io_uring_get_sqe(ring);
            if (!sqe) break;
            const size_t i = free_slots.back();
            free_slots.pop_back();
            if (!retry.empty()) {
              slot[i] = retry.back();
              retry.pop_back();
            } else {
              slot[i] = todo[next++];
            }
            io_uring_prep_read(sqe, fd, slot[i].dst, (unsigned)slot[i].n, slot[i].offset);
            io_uring_sqe_set_data64(sqe, i);
            ++inflight;
            queued = true;
          }
          if (queued) {
            const int rc = io_uring_submit(ring);
            if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) { drain(ring, inflight); fail(0, -rc, "io_uring_submit"); }
          }
          io_uring_cqe* cqe = nullptr;
          const int rc = io_uring_wait_cqe(ring, &cqe);
          if (rc == -EINTR || rc == -EAGAIN) continue;
          if (rc < 0) { drain(ring, inflight); fail(0, -rc, "io_uring_wait_cqe"); }
          const size_t i = (size_t)io_uring_cqe_get_data64(cqe);
          const int res = cqe->res;
          io_uring_cqe_seen(ring, cqe);
          --inflight;
          const Piece piece = slot[i];
          free_slots.push_back(i);
          if (res == -EINTR || res == -EAGAIN) { retry.push_back(piece); continue; }
          if (res < 0) { drain(ring, inflight); fail(piece.offset, -res, "read"); }
          if (res == 0) { drain(ring, inflight); fail(piece.offset, 0, "unexpected end of file"); }
          if ((size_t)res < piece.n) {
            // Short read: direct I/O needs the remainder aligned; else the buffered descriptor finishes it.
            if (dfd_ >= 0 && (res % align_) != 0) {
              pread_all(fd_, piece.offset + res, piece.n - res, piece.dst + res);
            } else {
              retry.push_back({piece.offset + (uint64_t)res, piece.n - (size_t)res, piece.dst + res});
            }
          }
        }
      }
    } catch (...) {
      if (ring) return_ring(ring);
      counters_.wait_ns += now_ns() - t0;
      throw;
    }
    if (ring) return_ring(ring);
    uint64_t bytes = 0;
    for (const ReadRequest& r : reqs) {
      bytes += r.n;
      if (dfd_ < 0) posix_fadvise(fd_, (off_t)r.offset, (off_t)r.n, POSIX_FADV_DONTNEED);
    }
    counters_.bytes += bytes;
    counters_.requests += reqs.size();
    counters_.wait_ns += now_ns() - t0;
  }

  void read_unaligned(uint64_t offset, size_t n, void* dst) override {
    const uint64_t t0 = now_ns();
    if (offset > size_ || n > size_ - offset)
      throw Error("read of '" + path_ + "' at offset " + std::to_string(offset) + " (" + std::to_string(n) +
                  " bytes) is past its end (" + std::to_string(size_) + " bytes)");
    pread_all(fd_, offset, n, static_cast<uint8_t*>(dst));
    posix_fadvise(fd_, (off_t)offset, (off_t)n, POSIX_FADV_DONTNEED);
    counters_.bytes += n;
    counters_.requests += 1;
    counters_.wait_ns += now_ns() - t0;
  }

 private:
  // Direct I/O only where the file system says how to align it (statx
  // STATX_DIOALIGN): tmpfs accepts O_DIRECT but keeps the file in memory
  // anyway and reports no alignment, so it takes the buffered path.
  void open_direct() {
    struct statx sx{};
    if (statx(AT_FDCWD, path_.c_str(), 0, STATX_DIOALIGN, &sx) != 0) return;
    if (!(sx.stx_mask & STATX_DIOALIGN) || sx.stx_dio_offset_align == 0 || sx.stx_dio_mem_align == 0) return;
    const int dfd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (dfd < 0) return;  // refused (EINVAL on file systems without direct I/O): buffered fallback
    align_ = std::max<size_t>(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
    dfd_ = dfd;
  }

  void check_request(const ReadRequest& r) const {
    if (r.offset > size_ || r.n > size_ - r.offset)
      throw Error("read of '" + path_ + "' at offset " + std::to_string(r.offset) + " (" + std::to_string(r.n) +
                  " bytes) is past its end (" + std::to_string(size_) + " bytes)");
    if (dfd_ >= 0 && (r.offset % align_ || r.n % align_ || (uintptr_t)r.dst % align_))
      throw Error("direct read of '" + path_ + "' at offset " + std::to_string(r.offset) + " (" +
                  std::to_string(r.n) + " bytes) is not aligned to " + std::to_string(align_) + " bytes");
  }

  void pread_all(int fd, uint64_t offset, size_t n, uint8_t* out) const {
    while (n > 0) {
      const ssize_t r = ::pread(fd, out, n, (off_t)offset);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r < 0) fail(offset, errno, "read");
      if (r == 0) fail(offset, 0, "unexpected end of file");
      out += r; n -= (size_t)r; offset += (uint64_t)r;
    }
  }

  [[noreturn]] void fail(uint64_t offset, int err, const char* what) const {
    throw Error(std::string(what) + " of '" + path_ + "' at offset " + std::to_string(offset) + " failed: " +
                (err ? std::strerror(err) : "unexpected end of file"));
  }

  // Waits for the requests still in flight before an error leaves read(): their buffers are the caller's.
  void drain(io_uring* ring, size_t inflight) {
    while (inflight > 0) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) break;
      io_uring_cqe_seen(ring, cqe);
      --inflight;
    }
  }

  io_uring* borrow_ring() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        io_uring* r = free_.back();
        free_.pop_back();
        return r;
      }
    }
    auto ring = std::make_unique<io_uring>();
    if (io_uring_queue_init((unsigned)options_.queue_depth, ring.get(), 0) != 0) return nullptr;  // pread instead
    std::lock_guard<std::mutex> lock(mu_);
    rings_.push_back(std::move(ring));
    return rings_.back().get();
  }

  void return_ring(io_uring* r) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(r);
  }

  std::string path_;
  StorageOptions options_;
  int fd_ = -1, dfd_ = -1;  // buffered and direct descriptors
  uint64_t size_ = 0;
  size_t align_ = 1;
  std::mutex mu_;
  std::vector<std::unique_ptr<io_uring>> rings_;
  std::vector<io_uring*> free_;
};

}  // namespace

std::unique_ptr<Storage> open_local_storage(const std::string& path, const StorageOptions& options) {
  return std::make_unique<LocalStorage>(path, options);
}

}  // namespace spool
