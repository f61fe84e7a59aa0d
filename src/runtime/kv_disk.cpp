// KvDiskTier: block files, their index and budget, and the writer thread.
#include "runtime/kv_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/kv_cache.h"
#include "runtime/kv_paged.h"
#include "model/model.h"
#include "runtime/state_snapshots.h"
#include "weights/checksums.h"

namespace spool {

namespace {

namespace fs = std::filesystem;

constexpr char kBlockMagic[8] = {'S', 'P', 'K', 'V', 'B', 'L', 'K', 0};
constexpr char kStateMagic[8] = {'S', 'P', 'K', 'V', 'S', 'T', 'A', 0};
constexpr uint32_t kVersion = 1;
const char* magic_of(KvDiskKind k) { return k == KvDiskKind::Block ? kBlockMagic : kStateMagic; }
const char* ext_of(KvDiskKind k) { return k == KvDiskKind::Block ? ".kvb" : ".kvs"; }

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t block_size;
  uint64_t fingerprint;
  uint64_t key, parent;
  uint64_t payload_bytes;
  uint32_t payload_crc;
  uint32_t header_crc;  // of the bytes before it, then the token ids
};
static_assert(sizeof(FileHeader) == 56, "KV block file header layout");

uint32_t header_crc(const FileHeader& h, std::span<const int32_t> tokens) {
  const uint32_t c = crc32_of(&h, offsetof(FileHeader, header_crc));
  return crc32_of(tokens.data(), tokens.size_bytes(), c);
}

// CRC-32 of a block's K then V bytes. Empty spans (MLA has no V) are skipped:
// zlib's crc32 with a null buffer returns the initial value, not its argument.
uint32_t payload_crc(std::span<const uint8_t> k, std::span<const uint8_t> v) {
  uint32_t c = 0;
  if (!k.empty()) c = crc32_of(k.data(), k.size(), c);
  if (!v.empty()) c = crc32_of(v.data(), v.size(), c);
  return c;
}

// FNV-1a over bytes, for the fingerprint.
struct Hasher {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
};

void hash_value(Hasher& h, const gguf::Value& v) {
  h.u64((uint64_t)v.type);
  h.u64((uint64_t)v.elem_type);
  h.u64((uint64_t)v.i);
  h.u64(v.u);
  h.bytes(&v.f, sizeof v.f);
  h.str(v.s);
  h.u64(v.ints.size());
  if (!v.ints.empty()) h.bytes(v.ints.data(), v.ints.size() * sizeof(int64_t));
  h.u64(v.floats.size());
  if (!v.floats.empty()) h.bytes(v.floats.data(), v.floats.size() * sizeof(double));
  h.u64(v.strings.size());
  for (const std::string& s : v.strings) h.str(s);
  h.u64(v.arrays.size());
  for (const gguf::Value& a : v.arrays) hash_value(h, a);
}

// Up to n bytes of a local file at offset (nothing for URLs or unreadable files).
void hash_file_sample(Hasher& h, const std::string& path, uint64_t offset, size_t n) {
  if (path.rfind("http://", 0) == 0 || path.rfind("https://", 0) == 0) return;
  std::ifstream f(path, std::ios::binary);
  if (!f) return;
  std::vector<char> buf(n);
  f.seekg((std::streamoff)offset);
  f.read(buf.data(), (std::streamsize)n);
  h.bytes(buf.data(), (size_t)f.gcount());
}

std::string hex16(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)v);
  return s;
}

bool pread_all(int fd, void* dst, size_t n, uint64_t off) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, (off_t)off);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r, n -= (size_t)r, off += (uint64_t)r;
  }
  return true;
}

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += r, n -= (size_t)r;
  }
  return true;
}

}  // namespace

uint64_t kv_fingerprint(const Model& model, const KvShape& shape, int block_size) {
  Hasher h;
  h.str("spool-kv-1");
  const gguf::File& file = model.file();
  for (const auto& [key, value] : file.kv) {
    h.str(key);
    hash_value(h, value);
  }
  const Manifest& m = file.manifest;
  h.u64(m.file_sizes.size());
  for (uint64_t s : m.file_sizes) h.u64(s);
  for (const TensorEntry& t : m.tensors) {
    h.str(t.name);
    h.u64((uint64_t)t.type);
    for (int64_t d : t.shape) h.u64((uint64_t)d);
    h.u64((uint64_t)t.file);
    h.u64(t.offset);
    h.u64(t.bytes);
  }
  // Two files with one table (random weights of one shape, a re-quantized
  // file of the same types) differ in their bytes: sample the first and last
  // tensor of each local file.
  for (size_t f = 0; f < m.files.size(); ++f) {
    const TensorEntry *first = nullptr, *last = nullptr;
    for (const TensorEntry& t : m.tensors) {
      if (t.file != (int)f) continue;
      if (!first || t.offset < first->offset) first = &t;
      if (!last || t.offset > last->offset) last = &t;
    }
    if (first) hash_file_sample(h, m.files[f], first->offset, (size_t)std::min<uint64_t>(first->bytes, 4096));
    if (last) hash_file_sample(h, m.files[f], last->offset, (size_t)std::min<uint64_t>(last->bytes, 4096));
  }
  h.u64((uint64_t)shape.n_layer);
  h.u64((uint64_t)shape.k_row());
  h.u64((uint64_t)shape.v_row());
  h.u64((uint64_t)shape.elem_bytes());
  h.u64(shape.recurrent.empty() ? 0 : shape.recurrent.bytes_per_seq());
  h.u64((uint64_t)block_size);
  h.str(isa_name(kernels().isa));
  return h.h;
}

std::unique_ptr<KvDiskTier> make_kv_disk_tier(const Model& model, const std::string& dir, uint64_t max_bytes,
                                              int block_size) {
  const KvShape shape = model.kv_shape();
  KvDiskOptions d;
  d.dir = dir;
  d.max_bytes = max_bytes;
  d.block_size = block_size;
  d.block_bytes = PagedKvCache::block_bytes(shape, block_size);
  d.state_bytes = shape.recurrent.empty() ? 0 : state_floats(shape.recurrent) * sizeof(float);
  d.fingerprint = kv_fingerprint(model, shape, block_size);
  return std::make_unique<KvDiskTier>(d);
}

KvDiskTier::KvDiskTier(KvDiskOptions options) : opt_(std::move(options)) {
  if (opt_.dir.empty()) throw Error("KV disk tier: no directory given");
  if (opt_.max_bytes == 0) throw Error("KV disk tier: the size limit must be positive");
  if (opt_.block_size <= 0 || opt_.block_bytes == 0) throw Error("KV disk tier: bad block shape");
  model_dir_ = (fs::path(opt_.dir) / hex16(opt_.fingerprint)).string();
  std::error_code ec;
  fs::create_directories(model_dir_, ec);
  if (ec) throw Error("KV disk tier: cannot create " + model_dir_ + ": " + ec.message());
  // Only the server's user reads KV (it holds the conversations' contents).
  fs::permissions(opt_.dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  fs::permissions(model_dir_, fs::perms::owner_all, fs::perm_options::replace, ec);
  // Index every model's block files, oldest use first; drop interrupted writes.
  struct Found {
    std::string path;
    uint64_t bytes;
    fs::file_time_type t;
  };
  std::vector<Found> found;
  for (const auto& sub : fs::directory_iterator(opt_.dir, ec)) {
    if (!sub.is_directory()) continue;
    std::error_code ec2;
    for (const auto& e : fs::directory_iterator(sub.path(), ec2)) {
      const std::string p = e.path().string();
      if (!e.is_regular_file()) continue;
      if (p.find(".tmp") != std::string::npos) {
        fs::remove(e.path(), ec2);
        continue;
      }
      if (e.path().extension() != ".kvb" && e.path().extension() != ".kvs") continue;
      found.push_back({p, (uint64_t)e.file_size(ec2), e.last_write_time(ec2)});
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.t < b.t; });
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Found& f : found) index_add(f.path, f.bytes);
    enforce_budget();
  }
  writer_ = std::thread([this] { writer_loop(); });
}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

std::string KvDiskTier::path_of(uint64_t key, KvDiskKind kind) const {
  return model_dir_ + "/" + hex16(key) + ext_of(kind);
}

bool KvDiskTier::contains(uint64_t key, KvDiskKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.count(path_of(key, kind)) != 0;
}

void KvDiskTier::store(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, std::span<const uint8_t> k,
                       std::span<const uint8_t> v, KvDiskKind kind) {
  const uint64_t payload = kind == KvDiskKind::Block ? opt_.block_bytes : opt_.state_bytes;
  SPOOL_CHECK((int)tokens.size() == opt_.block_size && payload > 0 && k.size() + v.size() == payload);
  const size_t n = sizeof(FileHeader) + tokens.size_bytes() + k.size() + v.size();
  const std::string path = path_of(key, kind);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queued_.count(path) || files_.count(path)) return;
    if (pending_bytes_ + n > opt_.max_pending_bytes) {
      ++stats_.writes_dropped;
      return;
    }
    queued_[path] = true;
    pending_bytes_ += n;
  }
  Job job{path, std::vector<uint8_t>(n)};
  FileHeader h{};
  std::memcpy(h.magic, magic_of(kind), sizeof h.magic);
  h.version = kVersion;
  h.block_size = (uint32_t)opt_.block_size;
  h.fingerprint = opt_.fingerprint;
  h.key = key;
  h.parent = parent;
  h.payload_bytes = k.size() + v.size();
  h.payload_crc = payload_crc(k, v);
  h.header_crc = header_crc(h, tokens);
  uint8_t* p = job.bytes.data();
  std::memcpy(p, &h, sizeof h);
  std::memcpy(p + sizeof h, tokens.data(), tokens.size_bytes());
  if (!k.empty()) std::memcpy(p + sizeof h + tokens.size_bytes(), k.data(), k.size());
  if (!v.empty()) std::memcpy(p + sizeof h + tokens.size_bytes() + k.size(), v.data(), v.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void KvDiskTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, everything written
    Job job = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    write_one(job);
    lock.lock();
    writing_ = false;
    queued_.erase(job.path);
    pending_bytes_ -= job.bytes.size();
    if (queue_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void KvDiskTier::write_one(Job& job) {
  const std::string& path = job.path;
  // Unique per process and write: two processes (serve and run) may save the same block at once.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++tmp_seq_);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write_all(fd, job.bytes.data(), job.bytes.size());
  const int err = ok ? 0 : errno;
  if (fd >= 0) ok = (::close(fd) == 0) && ok;
  if (ok) ok = ::rename(tmp.c_str(), path.c_str()) == 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    ::unlink(tmp.c_str());
    if (stats_.write_errors++ == 0 || stats_.write_errors % 1000 == 0)
      std::fprintf(stderr, "spool: kv-disk: cannot write %s: %s (the block stays in memory only; %llu failed writes)\n",
                   path.c_str(), std::strerror(err ? err : errno), (unsigned long long)stats_.write_errors);
    return;
  }
  ++stats_.writes;
  stats_.write_bytes += job.bytes.size();
  index_add(path, job.bytes.size());
  enforce_budget();
}

bool KvDiskTier::load(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, std::span<uint8_t> k,
                      std::span<uint8_t> v, KvDiskKind kind) {
  const std::string path = path_of(key, kind);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!files_.count(path)) return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::lock_guard<std::mutex> lock(mu_);
    forget(path);
    return false;
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  const size_t want = sizeof(FileHeader) + tokens.size_bytes() + k.size() + v.size();
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (uint64_t)st.st_size != want) {
    drop_bad(path, "size " + std::to_string((long long)st.st_size) + " bytes, expected " + std::to_string(want) +
                       " (truncated or not a block of this model)");
    return false;
  }
  FileHeader h{};
  std::vector<int32_t> stored(tokens.size());
  if (!pread_all(fd, &h, sizeof h, 0) || !pread_all(fd, stored.data(), stored.size() * 4, sizeof h)) {
    drop_bad(path, "read error");
    return false;
  }
  if (std::memcmp(h.magic, magic_of(kind), sizeof h.magic) != 0 || h.version != kVersion) {
    drop_bad(path, "not a spool KV block file (magic or version)");
    return false;
  }
  if (h.header_crc != header_crc(h, stored)) {
    drop_bad(path, "header checksum mismatch");
    return false;
  }
  if (h.fingerprint != opt_.fingerprint || h.key != key || (int)h.block_size != opt_.block_size ||
      h.payload_bytes != k.size() + v.size()) {
    drop_bad(path, "written for another model, key or block shape");
    return false;
  }
  // A different parent or different tokens under the same key: a hash
  // collision, not damage. The file stays; this prefix is recomputed.
  if (h.parent != parent || !std::equal(stored.begin(), stored.end(), tokens.begin())) return false;
  if ((!k.empty() && !pread_all(fd, k.data(), k.size(), sizeof h + stored.size() * 4)) ||
      (!v.empty() && !pread_all(fd, v.data(), v.size(), sizeof h + stored.size() * 4 + k.size()))) {
    drop_bad(path, "read error");
    return false;
  }
  if (payload_crc(k, v) != h.payload_crc) {
    drop_bad(path, "payload checksum mismatch");
    return false;
  }
  ::futimens(fd, nullptr);  // its use, for the LRU order after a restart
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mu_);
  touch(path);
  ++stats_.hits;
  stats_.hit_bytes += want;
  stats_.load_seconds += dt;
  return true;
}

void KvDiskTier::will_load(std::span<const uint64_t> keys) {
  for (uint64_t key : keys) {
    const std::string path = path_of(key);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!files_.count(path)) return;  // loads stop at the first block not on disk
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    ::close(fd);
  }
}

void KvDiskTier::drop_bad(const std::string& path, const std::string& why) {
  std::fprintf(stderr, "spool: kv-disk: dropping %s: %s; the prefix is recomputed\n", path.c_str(), why.c_str());
  ::unlink(path.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  forget(path);
  ++stats_.rejected;
}

void KvDiskTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

KvDiskStats KvDiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvDiskStats s = stats_;
  s.pending = queued_.size();
  return s;
}

void KvDiskTier::index_add(const std::string& path, uint64_t bytes) {
  forget(path);
  lru_.push_back({path, bytes});
  files_[path] = std::prev(lru_.end());
  ++stats_.files;
  stats_.bytes += bytes;
}

void KvDiskTier::touch(const std::string& path) {
  auto it = files_.find(path);
  if (it != files_.end()) lru_.splice(lru_.end(), lru_, it->second);
}

void KvDiskTier::forget(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return;
  --stats_.files;
  stats_.bytes -= it->second->bytes;
  lru_.erase(it->second);
  files_.erase(it);
}

void KvDiskTier::enforce_budget() {
  while (stats_.bytes > opt_.max_bytes && !lru_.empty()) {
    const std::string victim = lru_.front().path;
    ::unlink(victim.c_str());
    forget(victim);
    ++stats_.evicted;
  }
}

}  // namespace spool
