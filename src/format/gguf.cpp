// GGUF parsing with bounds checks on every read. Layout (v2/v3, little endian):
// magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv (key, type,
// value), then n_tensors (name, u32 n_dims, u64 ne[n_dims], u32 type, u64
// offset), padding to general.alignment, then the tensor data section.
#include "format/gguf.h"

#include <map>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <regex>

#include "core/error.h"
#include "storage/storage.h"

namespace spool::gguf {
namespace {

// Buffered sequential reader over a Storage (a local file or a URL) that
// knows the file size and refuses to read past it.
class Reader {
 public:
  Reader(const std::string& path) : path_(path) {
    if (!is_url(path)) {
      struct stat st{};
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw Error("'" + path + "' is a directory, not a GGUF file");
    }
    StorageOptions options;
    options.direct = false;  // the header is read once, in small pieces
    storage_ = open_storage(path, options);
    size_ = storage_->size();
  }

  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void read(void* dst, uint64_t n, const std::string& what) {
    if (n > remaining())
      throw Error("'" + path_ + "' is truncated: " + what + " needs " + std::to_string(n) +
                  " bytes at offset " + std::to_string(pos_) + ", file has " + std::to_string(size_));
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (buf_pos_ == buf_len_) fill();
      const uint64_t k = std::min<uint64_t>(n, buf_len_ - buf_pos_);
      std::memcpy(out, buf_.data() + buf_pos_, k);
      out += k; n -= k; buf_pos_ += k; pos_ += k;
    }
  }
  template <typename T> T get(const std::string& what) { T v; read(&v, sizeof v, what); return v; }

  std::string get_string(const std::string& what) {
    const uint64_t len = get<uint64_t>(what + " (string length)");
    if (len > remaining())
      throw Error("'" + path_ + "' is corrupt: " + what + " has string length " + std::to_string(len) +
                  " past the end of the file");
    std::string s(len, '\0');
    read(s.data(), len, what);
    return s;
  }

 private:
  void fill() {
    buf_.resize(1 << 20);
    const size_t n = (size_t)std::min<uint64_t>(buf_.size(), size_ - pos_);
    storage_->read_unaligned(pos_, n, buf_.data());
    buf_len_ = n;
    buf_pos_ = 0;
  }

  std::string path_;
  std::unique_ptr<Storage> storage_;
  uint64_t size_ = 0, pos_ = 0;
  std::vector<uint8_t> buf_;
  size_t buf_pos_ = 0, buf_len_ = 0;
};

constexpr uint64_t kMaxArrayLen = 1ull << 32;
constexpr int kMaxDepth = 4;

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

// Reads one scalar of type t into v (integer types fill i/u/f; floats fill f).
void read_scalar(Reader& r, ValueType t, Value& v, const std::string& what) {
  switch (t) {
    case ValueType::UINT8: v.u = r.get<uint8_t>(what); v.i = (int64_t)v.u; break;
    case ValueType::INT8: v.i = r.get<int8_t>(what); v.u = (uint64_t)v.i; break;
    case ValueType::UINT16: v.u = r.get<uint16_t>(what); v.i = (int64_t)v.u; break;
    case ValueType::INT16: v.i = r.get<int16_t>(what); v.u = (uint64_t)v.i; break;
    case ValueType::UINT32: v.u = r.get<uint32_t>(what); v.i = (int64_t)v.u; break;
    case ValueType::INT32: v.i = r.get<int32_t>(what); v.u = (uint64_t)v.i; break;
    case ValueType::UINT64: v.u = r.get<uint64_t>(what); v.i = (int64_t)v.u; break;
    case ValueType::INT64: v.i = r.get<int64_t>(what); v.u = (uint64_t)v.i; break;
    case ValueType::BOOL: {
      const uint8_t b = r.get<uint8_t>(what);
      if (b > 1) throw Error(what + ": invalid bool value " + std::to_string(b));
      v.i = b; v.u = b; break;
    }
    case ValueType::FLOAT32: v.f = r.get<float>(what); return;
    case ValueType::FLOAT64: v.f = r.get<double>(what); return;
    default: throw Error(what + ": not a scalar type");
  }
  v.f = (double)v.i;
}

ValueType read_type(Reader& r, const std::string& what) {
  const uint32_t t = r.get<uint32_t>(what + " (type)");
  if (t > (uint32_t)ValueType::FLOAT64)
    throw Error(what + ": unknown metadata value type " + std::to_string(t));
  return (ValueType)t;
}

Value read_value(Reader& r, ValueType t, const std::string& what, int depth) {
  Value v;
  v.type = t;
  if (t == ValueType::STRING) { v.s = r.get_string(what); return v; }
  if (t != ValueType::ARRAY) { read_scalar(r, t, v, what); return v; }
  if (depth >= kMaxDepth) throw Error(what + ": arrays nested too deeply");
  v.elem_type = read_type(r, what + " (array element type)");
  const uint64_t n = r.get<uint64_t>(what + " (array length)");
  const size_t es = scalar_size(v.elem_type);
  if (n > kMaxArrayLen || (es && n * es > r.remaining()) || (!es && n * 8 > r.remaining()))
    throw Error(what + ": array length " + std::to_string(n) + " does not fit in the file (truncated or corrupt)");
  if (v.elem_type == ValueType::STRING) {
    v.strings.reserve(n);
    for (uint64_t k = 0; k < n; ++k) v.strings.push_back(r.get_string(what));
  } else if (v.elem_type == ValueType::ARRAY) {
    for (uint64_t k = 0; k < n; ++k) v.arrays.push_back(read_value(r, ValueType::ARRAY, what, depth + 1));
  } else if (v.elem_type == ValueType::FLOAT32 || v.elem_type == ValueType::FLOAT64) {
    v.floats.resize(n);
    Value e;
    for (uint64_t k = 0; k < n; ++k) { read_scalar(r, v.elem_type, e, what); v.floats[k] = e.f; }
  } else {
    v.ints.resize(n);
    Value e;
    for (uint64_t k = 0; k < n; ++k) { read_scalar(r, v.elem_type, e, what); v.ints[k] = e.i; }
  }
  return v;
}

struct Header {
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
};

Header read_header(Reader& r, const std::string& path) {
  char magic[4];
  r.read(magic, 4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) throw Error("'" + path + "' is not a GGUF file (bad magic)");
  Header h;
  h.version = r.get<uint32_t>("version");
  if (h.version == 1)
    throw Error("'" + path + "' is GGUF version 1, which is no longer supported; convert it to GGUF v3 " +
                "(e.g. with llama.cpp's convert scripts)");
  if (h.version != 2 && h.version != 3)
    throw Error("'" + path + "' has unsupported GGUF version " + std::to_string(h.version));
  h.n_tensors = r.get<uint64_t>("tensor count");
  h.n_kv = r.get<uint64_t>("metadata count");
  if (h.n_tensors > r.size() / 24 || h.n_kv > r.size() / 12)
    throw Error("'" + path + "' is corrupt: header claims " + std::to_string(h.n_tensors) + " tensors and " +
                std::to_string(h.n_kv) + " metadata keys");
  return h;
}

// Parses one GGUF file; appends its tensors to `file.manifest` as file index `file_index`.
void parse_file(const std::string& path, int file_index, File& file, std::map<std::string, Value>& kv) {
  Reader r(path);
  const Header h = read_header(r, path);
  if (file_index == 0) file.version = h.version;
  for (uint64_t k = 0; k < h.n_kv; ++k) {
    const std::string key = r.get_string("metadata key #" + std::to_string(k));
    const ValueType t = read_type(r, "metadata '" + key + "'");
    kv[key] = read_value(r, t, "metadata '" + key + "'", 0);
  }
  uint64_t alignment = 32;
  if (auto it = kv.find("general.alignment"); it != kv.end()) {
    alignment = it->second.u;
    if (!it->second.is_integer() || alignment == 0 || (alignment & (alignment - 1)))
      throw Error("'" + path + "': general.alignment must be a power of two, got " + it->second.to_string());
  }
  if (file_index == 0) file.alignment = alignment;

  std::vector<TensorEntry> entries(h.n_tensors);
  for (uint64_t k = 0; k < h.n_tensors; ++k) {
    TensorEntry& e = entries[k];
    e.name = r.get_string("tensor #" + std::to_string(k) + " name");
    const std::string what = "tensor '" + e.name + "'";
    const uint32_t n_dims = r.get<uint32_t>(what + " dims");
    if (n_dims == 0 || n_dims > 4) throw Error(what + " has " + std::to_string(n_dims) + " dimensions (1-4 allowed)");
    e.shape.resize(n_dims);
    int64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.get<uint64_t>(what + " shape");
      if (ne == 0 || ne > (1ull << 40) || (uint64_t)n > (uint64_t)std::numeric_limits<int64_t>::max() / ne)
        throw Error(what + " has an invalid shape dimension " + std::to_string(ne));
      e.shape[d] = (int64_t)ne;
      n *= (int64_t)ne;
    }
    const uint32_t type_id = r.get<uint32_t>(what + " type");
    const DTypeTraits* tr = find_dtype_traits(type_id);
    if (!tr) {
      // ggml types spool does not read (yet), named so a user knows what the file needs.
      static const std::map<uint32_t, const char*> kOtherGgmlTypes = {
          {24, "I8"}, {25, "I16"}, {26, "I32"}, {27, "I64"}, {28, "F64"}, {40, "NVFP4"}};
      // Ids ggml has retired from GGUF files (old llama.cpp builds wrote them).
      static const std::map<uint32_t, const char*> kRetiredGgmlTypes = {
          {4, "Q4_2"}, {5, "Q4_3"}, {31, "Q4_0_4_4"}, {32, "Q4_0_4_8"}, {33, "Q4_0_8_8"},
          {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}};
      const auto it = kOtherGgmlTypes.find(type_id);
      const auto retired = kRetiredGgmlTypes.find(type_id);
      std::string why;
      if (it != kOtherGgmlTypes.end()) why = std::string(" (") + it->second + ", which spool cannot read)";
      else if (retired != kRetiredGgmlTypes.end())
        why = std::string(" (") + retired->second + ", a type ggml no longer reads from GGUF files: requantize it)";
      throw Error(what + " has unsupported tensor type id " + std::to_string(type_id) + why);
    }
    e.type = (DType)type_id;
    if (e.shape[0] % tr->block_size != 0)
      throw Error(what + " of type " + tr->name + " has row length " + std::to_string(e.shape[0]) +
                  ", not a multiple of the block size " + std::to_string(tr->block_size));
    e.bytes = (uint64_t)(n / tr->block_size) * tr->block_bytes;
    e.offset = r.get<uint64_t>(what + " offset");
    if (e.offset % alignment != 0)
      throw Error(what + " has offset " + std::to_string(e.offset) + " not aligned to " + std::to_string(alignment));
    e.file = file_index;
  }
  const uint64_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
  for (TensorEntry& e : entries) {
    const uint64_t rel = e.offset;
    e.offset += data_start;
    if (rel > r.size() || e.offset + e.bytes > r.size() || e.offset + e.bytes < e.offset)
      throw Error("'" + path + "' is truncated or corrupt: tensor '" + e.name + "' (" + std::to_string(e.bytes) +
                  " bytes at offset " + std::to_string(e.offset) + ") extends past the end of the file (" +
                  std::to_string(r.size()) + " bytes)");
    file.manifest.add(std::move(e));
  }
  file.manifest.files.push_back(path);
  file.manifest.file_sizes.push_back(r.size());
}

// For "dir/name-00001-of-00003.gguf" returns the paths of all shards.
std::vector<std::string> split_paths(const std::string& path) {
  static const std::regex re("^(.*)-(\\d{5})-of-(\\d{5})\\.gguf$");
  std::smatch m;
  if (!std::regex_match(path, m, re)) return {path};
  const int n = std::stoi(m[3].str());
  if (std::stoi(m[2].str()) != 1)
    throw Error("'" + path + "' is shard " + m[2].str() + " of a split model; open the first shard (-00001-of-" +
                m[3].str() + ".gguf)");
  std::vector<std::string> out;
  for (int k = 1; k <= n; ++k) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", k, n);
    out.push_back(m[1].str() + suffix);
  }
  return out;
}

}  // namespace

const char* value_type_name(ValueType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
  return (uint32_t)t <= 12 ? names[(uint32_t)t] : "?";
}

bool Value::is_integer() const {
  return type != ValueType::STRING && type != ValueType::ARRAY && !is_float();
}

Value Value::of_int(int64_t x, ValueType t) {
  Value v;
  v.type = t;
  v.i = x;
  v.u = (uint64_t)x;
  v.f = (double)x;
  return v;
}

Value Value::of_float(double x, ValueType t) {
  Value v;
  v.type = t;
  v.f = x;
  return v;
}

Value Value::of_bool(bool x) { return of_int(x ? 1 : 0, ValueType::BOOL); }

Value Value::of_string(std::string x) {
  Value v;
  v.type = ValueType::STRING;
  v.s = std::move(x);
  return v;
}

Value Value::of_strings(std::vector<std::string> x) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = ValueType::STRING;
  v.strings = std::move(x);
  return v;
}

Value Value::of_ints(std::vector<int64_t> x, ValueType elem) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.ints = std::move(x);
  return v;
}

size_t Value::array_size() const {
  if (!is_array()) return 0;
  return ints.size() + floats.size() + strings.size() + arrays.size();
}

std::string Value::to_string(size_t max_elems) const {
  switch (type) {
    case ValueType::STRING: return s.size() > 80 ? "\"" + s.substr(0, 77) + "...\"" : "\"" + s + "\"";
    case ValueType::FLOAT32: case ValueType::FLOAT64: {
      char b[64]; std::snprintf(b, sizeof b, "%g", f); return b;
    }
    case ValueType::BOOL: return i ? "true" : "false";
    case ValueType::UINT64: return std::to_string(u);
    case ValueType::ARRAY: {
      std::string out = std::string(value_type_name(elem_type)) + "[" + std::to_string(array_size()) + "] {";
      for (size_t k = 0; k < std::min(max_elems, array_size()); ++k) {
        if (k) out += ", ";
        if (!strings.empty()) out += "\"" + strings[k] + "\"";
        else if (!floats.empty()) { char b[32]; std::snprintf(b, sizeof b, "%g", floats[k]); out += b; }
        else if (!ints.empty()) out += std::to_string(ints[k]);
        else out += arrays[k].to_string(2);
      }
      return out + (array_size() > max_elems ? ", ...}" : "}");
    }
    default: return std::to_string(i);
  }
}

const Value* File::find(const std::string& key) const {
  auto it = kv.find(key);
  return it == kv.end() ? nullptr : &it->second;
}

int64_t File::get_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw Error("model metadata is missing '" + key + "'");
  if (!v->is_integer()) throw Error("model metadata '" + key + "' should be an integer, is " + v->to_string());
  return v->i;
}
int64_t File::get_int(const std::string& key, int64_t def) const { return has(key) ? get_int(key) : def; }

double File::get_float(const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw Error("model metadata is missing '" + key + "'");
  if (!v->is_float() && !v->is_integer()) throw Error("model metadata '" + key + "' should be a number");
  return v->f;
}
double File::get_float(const std::string& key, double def) const { return has(key) ? get_float(key) : def; }

bool File::get_bool(const std::string& key, bool def) const {
  const Value* v = find(key);
  if (!v) return def;
  if (!v->is_integer()) throw Error("model metadata '" + key + "' should be a bool");
  return v->i != 0;
}

std::string File::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw Error("model metadata is missing '" + key + "'");
  if (v->type != ValueType::STRING) throw Error("model metadata '" + key + "' should be a string");
  return v->s;
}
std::string File::get_string(const std::string& key, const std::string& def) const {
  return has(key) ? get_string(key) : def;
}

const Value& File::get_array(const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw Error("model metadata is missing '" + key + "'");
  if (!v->is_array()) throw Error("model metadata '" + key + "' should be an array");
  return *v;
}

File open(const std::string& path) {
  File file;
  const std::vector<std::string> paths = split_paths(path);
  for (size_t k = 0; k < paths.size(); ++k) {
    std::map<std::string, Value> kv;
    parse_file(paths[k], (int)k, file, kv);
    if (k == 0) file.kv = std::move(kv);
  }
  if (const Value* n = file.find("split.count"); n && (size_t)n->i != paths.size())
    throw Error("'" + path + "' says split.count = " + std::to_string(n->i) + " but " +
                std::to_string(paths.size()) + " shard(s) were opened");
  return file;
}

}  // namespace spool::gguf
