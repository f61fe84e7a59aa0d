// GGUF v3 writing. The file is produced in one sequential pass through a
// double-buffered sink: the caller fills one large buffer (in parallel, for
// generated rows) while a background thread write()s the other, so CPU work
// and disk I/O overlap. The file appears under its name only once complete.
#include "format/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"

namespace spool::gguf {

// ---- value builders ---------------------------------------------------------

namespace {
Value int_value(ValueType t, int64_t i, uint64_t u) {
  Value v;
  v.type = t;
  v.i = i;
  v.u = u;
  v.f = (double)i;
  return v;
}
}  // namespace

Value value_u8(uint8_t x) { return int_value(ValueType::UINT8, x, x); }
Value value_i8(int8_t x) { return int_value(ValueType::INT8, x, (uint64_t)(int64_t)x); }
Value value_u16(uint16_t x) { return int_value(ValueType::UINT16, x, x); }
Value value_i16(int16_t x) { return int_value(ValueType::INT16, x, (uint64_t)(int64_t)x); }
Value value_u32(uint32_t x) { return int_value(ValueType::UINT32, x, x); }
Value value_i32(int32_t x) { return int_value(ValueType::INT32, x, (uint64_t)(int64_t)x); }
Value value_u64(uint64_t x) { return int_value(ValueType::UINT64, (int64_t)x, x); }
Value value_i64(int64_t x) { return int_value(ValueType::INT64, x, (uint64_t)x); }
Value value_bool(bool x) { return int_value(ValueType::BOOL, x ? 1 : 0, x ? 1 : 0); }

Value value_f32(float x) {
  Value v;
  v.type = ValueType::FLOAT32;
  v.f = x;
  return v;
}
Value value_f64(double x) {
  Value v;
  v.type = ValueType::FLOAT64;
  v.f = x;
  return v;
}
Value value_string(std::string s) {
  Value v;
  v.type = ValueType::STRING;
  v.s = std::move(s);
  return v;
}
Value value_int_array(ValueType elem, std::vector<int64_t> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.ints = std::move(xs);
  return v;
}
Value value_float_array(ValueType elem, std::vector<double> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.floats = std::move(xs);
  return v;
}
Value value_string_array(std::vector<std::string> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = ValueType::STRING;
  v.strings = std::move(xs);
  return v;
}
Value value_array_array(std::vector<Value> arrays) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = ValueType::ARRAY;
  v.arrays = std::move(arrays);
  return v;
}

// ---- the sink: double-buffered sequential file output -----------------------

class Writer::Sink {
 public:
  static constexpr size_t kBufferBytes = 32u << 20;

  Sink(const std::string& path, bool direct) : path_(path) {
    fd_ = -1;
#ifdef O_DIRECT
    // O_DIRECT where the filesystem takes it (not tmpfs): the page cache's
    // write-back is often several times slower than the device, and a big
    // file written through it evicts everyone else's cached data.
    if (direct) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
#else
    (void)direct;
#endif
    if (fd_ < 0) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create '" + path + "': " + std::strerror(errno));
    fill_.reserve(kBufferBytes);
    spare_.reserve(kBufferBytes);
    thread_ = std::thread([this] { loop(); });
  }
  ~Sink() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (fd_ >= 0) ::close(fd_);
    std::free(staging_);
  }
  bool direct() const { return direct_; }

  void append(const void* p, size_t n) {
    std::memcpy(reserve(n), p, n);
    commit(n);
  }
  // Space for n bytes at the end of the fill buffer (valid until commit).
  uint8_t* reserve(size_t n) {
    if (fill_.size() + n > std::max(kBufferBytes, n)) hand_off();
    const size_t at = fill_.size();
    if (fill_.capacity() < at + n) fill_.reserve(at + n);
    fill_.resize(at + n);  // committed size is tracked separately below
    reserved_at_ = at;
    return fill_.data() + at;
  }
  void commit(size_t n) {
    fill_.resize(reserved_at_ + n);
    if (fill_.size() >= kBufferBytes) hand_off();
  }
  // Writes everything and closes the file; throws on any I/O error.
  void close() {
    hand_off();
    wait_idle();
    if (direct_ && staged_ > 0) {  // the unaligned tail, without O_DIRECT
#ifdef O_DIRECT
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) fail("fcntl");
#endif
      write_all(staging_, staged_);
      staged_ = 0;
    }
    // No fsync: the rename in finish() already keeps partial files out of
    // sight, and forcing a multi-GB file to the device would only slow synth.
    if (::close(fd_) != 0) fail("close");
    fd_ = -1;
    rethrow();
  }

 private:
  // Gives the fill buffer to the I/O thread (after it finished the previous one).
  void hand_off() {
    wait_idle();
    rethrow();
    if (fill_.empty()) return;
    std::swap(fill_, spare_);
    fill_.clear();
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = true;
    }
    cv_.notify_all();
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
  }
  void rethrow() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.empty()) throw Error(error_);
  }
  void fail(const char* op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = std::string(op) + " failed on '" + path_ + "': " + std::strerror(errno);
  }
  void loop() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return busy_ || stop_; });
      if (!busy_) return;
      lock.unlock();
      if (direct_) write_direct(spare_.data(), spare_.size());
      else write_all(spare_.data(), spare_.size());
      spare_.clear();
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }
  void write_all(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, 1u << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) { fail("write"); return; }
      p += w;
      n -= (size_t)w;
    }
  }

  // O_DIRECT needs aligned memory, lengths and offsets: the data goes through
  // an aligned staging buffer, whole 4 KiB blocks are written and the
  // remainder waits for the next buffer (or close()).
  static constexpr size_t kDirectAlign = 4096;
  void write_direct(const uint8_t* p, size_t n) {
    if (staged_ + n > staging_size_) {
      const size_t size = (staged_ + n + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
      void* grown = nullptr;
      if (posix_memalign(&grown, kDirectAlign, size) != 0) {
        fail("posix_memalign");
        return;
      }
      if (staged_) std::memcpy(grown, staging_, staged_);
      std::free(staging_);
      staging_ = static_cast<uint8_t*>(grown);
      staging_size_ = size;
    }
    std::memcpy(staging_ + staged_, p, n);
    staged_ += n;
    const size_t whole = staged_ / kDirectAlign * kDirectAlign;
    if (whole == 0) return;
    write_all(staging_, whole);
    std::memmove(staging_, staging_ + whole, staged_ - whole);
    staged_ -= whole;
  }

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  uint8_t* staging_ = nullptr;  // I/O thread only
  size_t staging_size_ = 0, staged_ = 0;
  std::vector<uint8_t> fill_, spare_;  // spare_ is owned by the I/O thread while busy_
  size_t reserved_at_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false, stop_ = false;
  std::string error_;
};

// ---- serialization -----------------------------------------------------------

namespace {

class Bytes {
 public:
  template <typename T> void put(T x) {
    const size_t at = out.size();
    out.resize(at + sizeof x);
    std::memcpy(out.data() + at, &x, sizeof x);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> out;
};

void put_scalar(Bytes& b, ValueType t, int64_t i, uint64_t u, double f) {
  switch (t) {
    case ValueType::UINT8: b.put<uint8_t>((uint8_t)i); break;
    case ValueType::INT8: b.put<int8_t>((int8_t)i); break;
    case ValueType::UINT16: b.put<uint16_t>((uint16_t)i); break;
    case ValueType::INT16: b.put<int16_t>((int16_t)i); break;
    case ValueType::UINT32: b.put<uint32_t>((uint32_t)i); break;
    case ValueType::INT32: b.put<int32_t>((int32_t)i); break;
    case ValueType::UINT64: b.put<uint64_t>(u); break;
    case ValueType::INT64: b.put<int64_t>(i); break;
    case ValueType::BOOL: b.put<uint8_t>(i ? 1 : 0); break;
    case ValueType::FLOAT32: b.put<float>((float)f); break;
    case ValueType::FLOAT64: b.put<double>(f); break;
    default: throw Error("GGUF writer: not a scalar type");
  }
}

// The body of an array: element type, count, elements.
void put_array(Bytes& b, const Value& v, const std::string& key) {
  b.put<uint32_t>((uint32_t)v.elem_type);
  b.put<uint64_t>(v.array_size());
  switch (v.elem_type) {
    case ValueType::STRING:
      if (v.strings.size() != v.array_size()) break;
      for (const std::string& s : v.strings) b.put_string(s);
      return;
    case ValueType::ARRAY:
      if (v.arrays.size() != v.array_size()) break;
      for (const Value& a : v.arrays) {
        if (!a.is_array()) throw Error("GGUF writer: '" + key + "' has a non-array element in an array of arrays");
        put_array(b, a, key);
      }
      return;
    case ValueType::FLOAT32: case ValueType::FLOAT64:
      if (v.floats.size() != v.array_size()) break;
      for (double f : v.floats) put_scalar(b, v.elem_type, 0, 0, f);
      return;
    default:
      if (v.ints.size() != v.array_size()) break;
      for (int64_t i : v.ints) put_scalar(b, v.elem_type, i, (uint64_t)i, (double)i);
      return;
  }
  throw Error("GGUF writer: array '" + key + "' holds elements that do not match its element type " +
              value_type_name(v.elem_type));
}

void put_value(Bytes& b, const Value& v, const std::string& key) {
  b.put<uint32_t>((uint32_t)v.type);
  if (v.type == ValueType::STRING) b.put_string(v.s);
  else if (v.type == ValueType::ARRAY) put_array(b, v, key);
  else put_scalar(b, v.type, v.i, v.u, v.f);
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

// ---- Writer -------------------------------------------------------------------

Writer::Writer() = default;

Writer::~Writer() {
  if (sink_ && !finished_) {
    sink_.reset();
    ::unlink((path_ + ".part").c_str());
  }
}

void Writer::set(const std::string& key, Value v) {
  if (sink_) throw Error("GGUF writer: metadata '" + key + "' set after the header was written");
  for (auto& [k, old] : kv_)
    if (k == key) { old = std::move(v); return; }
  kv_.emplace_back(key, std::move(v));
}

bool Writer::has(const std::string& key) const {
  for (const auto& kv : kv_)
    if (kv.first == key) return true;
  return false;
}

uint64_t Writer::alignment() const {
  for (const auto& [k, v] : kv_) {
    if (k != "general.alignment") continue;
    if (!v.is_integer() || v.u == 0 || (v.u & (v.u - 1)))
      throw Error("GGUF writer: general.alignment must be a power of two");
    return v.u;
  }
  return 32;
}

size_t Writer::add_tensor(const std::string& name, DType type, std::vector<int64_t> shape) {
  if (sink_) throw Error("GGUF writer: tensor '" + name + "' added after the header was written");
  if (shape.empty() || shape.size() > 4) throw Error("GGUF writer: tensor '" + name + "' must have 1-4 dimensions");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) throw Error("GGUF writer: tensor '" + name + "' has a non-positive dimension");
    n *= d;
  }
  const DTypeTraits& tr = dtype_traits(type);
  if (shape[0] % tr.block_size != 0)
    throw Error("GGUF writer: tensor '" + name + "' has row length " + std::to_string(shape[0]) +
                ", not a multiple of " + tr.name + "'s block size " + std::to_string(tr.block_size));
  for (const Tensor& t : tensors_)
    if (t.name == name) throw Error("GGUF writer: duplicate tensor '" + name + "'");
  Tensor t{name, type, std::move(shape)};
  t.bytes = (uint64_t)(n / tr.block_size) * tr.block_bytes;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

uint64_t Writer::tensor_bytes(size_t index) const { return tensors_.at(index).bytes; }

uint64_t Writer::data_bytes() const {
  uint64_t total = 0;
  for (const Tensor& t : tensors_) total = align_up(total + t.bytes, alignment());
  return total;
}

std::vector<uint8_t> Writer::serialize_header() const {
  const uint64_t align = alignment();
  Bytes b;
  for (char c : {'G', 'G', 'U', 'F'}) b.put<uint8_t>((uint8_t)c);
  b.put<uint32_t>(3);
  b.put<uint64_t>(tensors_.size());
  b.put<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    b.put_string(key);
    put_value(b, v, key);
  }
  for (const Tensor& t : tensors_) {
    b.put_string(t.name);
    b.put<uint32_t>((uint32_t)t.shape.size());
    for (int64_t d : t.shape) b.put<uint64_t>((uint64_t)d);
    b.put<uint32_t>((uint32_t)t.type);
    b.put<uint64_t>(t.offset);
  }
  b.out.resize(align_up(b.out.size(), align), 0);
  return std::move(b.out);
}

uint64_t Writer::header_bytes() const { return serialize_header().size(); }

void Writer::begin(const std::string& path) {
  if (sink_) throw Error("GGUF writer: begin() called twice");
  const uint64_t align = alignment();
  uint64_t offset = 0;
  for (Tensor& t : tensors_) {
    t.offset = offset;
    offset = align_up(offset + t.bytes, align);
  }
  const std::vector<uint8_t> header = serialize_header();
  path_ = path;
  sink_ = std::make_unique<Sink>(path + ".part", direct_io_);
  sink_->append(header.data(), header.size());
}

void Writer::start_tensor(size_t index) {
  if (!sink_) throw Error("GGUF writer: begin() must come before tensor data");
  if (index != next_tensor_ || index >= tensors_.size())
    throw Error("GGUF writer: tensor data must be written in declaration order (expected #" +
                std::to_string(next_tensor_) + ", got #" + std::to_string(index) + ")");
}

void Writer::end_tensor(size_t index) {
  const Tensor& t = tensors_[index];
  data_written_ = t.offset + t.bytes;
  const uint64_t padded = align_up(data_written_, alignment());
  if (padded > data_written_) {
    uint8_t* pad = sink_->reserve(padded - data_written_);
    std::memset(pad, 0, padded - data_written_);
    sink_->commit(padded - data_written_);
    data_written_ = padded;
  }
  ++next_tensor_;
}

void Writer::write_tensor(size_t index, const void* data) {
  start_tensor(index);
  const Tensor& t = tensors_[index];
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint64_t done = 0; done < t.bytes;) {
    const uint64_t n = std::min<uint64_t>(t.bytes - done, Sink::kBufferBytes);
    sink_->append(p + done, n);
    done += n;
  }
  end_tensor(index);
}

void Writer::write_tensor_rows(size_t index, const RowFiller& fill, ThreadPool* pool) {
  start_tensor(index);
  const Tensor& t = tensors_[index];
  const size_t bytes_per_row = row_bytes(t.type, t.shape[0]);
  const int64_t n_rows = (int64_t)(t.bytes / bytes_per_row);
  // One batch fills most of a sink buffer; tasks of ~256 KiB balance threads.
  const int64_t rows_per_batch = std::max<int64_t>(1, (int64_t)(Sink::kBufferBytes / 2 / bytes_per_row));
  const int64_t rows_per_task = std::max<int64_t>(1, (int64_t)((256u << 10) / bytes_per_row));
  for (int64_t row0 = 0; row0 < n_rows; row0 += rows_per_batch) {
    const int64_t rows = std::min(rows_per_batch, n_rows - row0);
    uint8_t* dst = sink_->reserve((size_t)rows * bytes_per_row);
    const int64_t n_tasks = (rows + rows_per_task - 1) / rows_per_task;
    auto task = [&](int64_t k, int) {
      const int64_t r = k * rows_per_task;
      fill(row0 + r, std::min(rows_per_task, rows - r), dst + (size_t)r * bytes_per_row);
    };
    if (pool && n_tasks > 1) pool->run(n_tasks, task);
    else for (int64_t k = 0; k < n_tasks; ++k) task(k, 0);
    sink_->commit((size_t)rows * bytes_per_row);
  }
  end_tensor(index);
}

void Writer::finish() {
  if (!sink_) throw Error("GGUF writer: finish() before begin()");
  if (next_tensor_ != tensors_.size())
    throw Error("GGUF writer: tensor '" + tensors_[next_tensor_].name + "' was never written");
  sink_->close();
  const std::string part = path_ + ".part";
  if (std::rename(part.c_str(), path_.c_str()) != 0)
    throw Error("cannot rename '" + part + "' to '" + path_ + "': " + std::strerror(errno));
  finished_ = true;
}

}  // namespace spool::gguf
