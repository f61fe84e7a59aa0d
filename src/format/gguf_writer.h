// GGUF v3 writer: metadata of every value type (nested arrays included), the
// tensor directory with aligned offsets, then tensor data streamed to disk in
// large buffered chunks. Rows can be produced in parallel on a ThreadPool while
// a background thread writes the previous chunk, so big files go at disk speed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace spool {
class ThreadPool;
}

namespace spool::gguf {

// Value builders for Writer::set (the reader's Value is the common currency,
// so metadata read from one file can be copied into another unchanged).
Value value_u8(uint8_t x);
Value value_i8(int8_t x);
Value value_u16(uint16_t x);
Value value_i16(int16_t x);
Value value_u32(uint32_t x);
Value value_i32(int32_t x);
Value value_u64(uint64_t x);
Value value_i64(int64_t x);
Value value_f32(float x);
Value value_f64(double x);
Value value_bool(bool x);
Value value_string(std::string s);
// Arrays: elem is the element type written to the file.
Value value_int_array(ValueType elem, std::vector<int64_t> xs);
Value value_float_array(ValueType elem, std::vector<double> xs);
Value value_string_array(std::vector<std::string> xs);
Value value_array_array(std::vector<Value> arrays);  // each element an ARRAY Value

class Writer {
 public:
  Writer();
  ~Writer();  // an unfinished file is removed
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Metadata, in insertion order; setting a key again replaces its value.
  // general.alignment (default 32) decides tensor data alignment.
  void set(const std::string& key, Value v);
  bool has(const std::string& key) const;

  // Declares a tensor (GGUF shape order: shape[0] is the row length). All
  // tensors must be declared before begin(); data is written in this order.
  size_t add_tensor(const std::string& name, DType type, std::vector<int64_t> shape);
  size_t n_tensors() const { return tensors_.size(); }
  uint64_t tensor_bytes(size_t index) const;
  uint64_t data_bytes() const;  // size of the data section, padding included
  // Size of everything before the data section (header, metadata, tensor
  // directory, padding) as begin() would write it now; with data_bytes() the
  // file's exact size, known before writing.
  uint64_t header_bytes() const;

  // Write with O_DIRECT where the filesystem allows it (else buffered, as by
  // default): for multi-GB files, whose page-cache write-back is slower than
  // the device. Call before begin().
  void set_direct_io(bool on) { direct_io_ = on; }

  // Opens `path` (written as path + ".part", renamed by finish()) and writes
  // the header, metadata and tensor directory.
  void begin(const std::string& path);

  // Writes the next tensor's data from memory (whole tensor).
  void write_tensor(size_t index, const void* data);
  // Writes the next tensor's data produced row by row: fill(row0, n_rows, dst)
  // writes rows [row0, row0 + n_rows) into dst. Chunks of rows are filled in
  // parallel on `pool` (when given) while the previous chunk is being written.
  using RowFiller = std::function<void(int64_t row0, int64_t n_rows, void* dst)>;
  void write_tensor_rows(size_t index, const RowFiller& fill, ThreadPool* pool);

  // Checks that every tensor was written, flushes, and renames into place.
  void finish();

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    uint64_t offset = 0;  // relative to the data section
    uint64_t bytes = 0;
  };
  class Sink;

  uint64_t alignment() const;
  std::vector<uint8_t> serialize_header() const;  // tensor offsets must be assigned
  void start_tensor(size_t index);
  void end_tensor(size_t index);

  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
  std::unique_ptr<Sink> sink_;
  std::string path_;
  size_t next_tensor_ = 0;
  uint64_t data_written_ = 0;  // bytes of the data section written so far
  bool finished_ = false;
  bool direct_io_ = false;
};

}  // namespace spool::gguf
