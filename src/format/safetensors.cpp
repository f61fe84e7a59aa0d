// safetensors parsing and whole-tensor reads.
#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fp16.h"
#include "storage/local_file.h"

namespace spool::safetensors {

int64_t Entry::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

const Entry& File::require(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw Error("'" + path + "' has no tensor '" + name + "'");
  return it->second;
}

namespace {

// A list of non-negative JSON integers (shape, data_offsets). Floats are refused:
// converting an out-of-range one would be undefined behaviour.
std::vector<uint64_t> index_list(const nlohmann::json& v, const std::string& what) {
  if (!v.is_array()) throw Error(what + " is not a list");
  std::vector<uint64_t> out;
  for (const nlohmann::json& x : v) {
    if (!x.is_number_unsigned()) throw Error(what + " holds " + x.dump() + ", not a non-negative integer");
    out.push_back(x.get<uint64_t>());
  }
  return out;
}

}  // namespace

File open(const std::string& path) {
  LocalFile f(path);
  File out;
  out.path = path;
  uint64_t hlen = 0;
  if (f.size() < 8) throw Error("'" + path + "' is not a safetensors file (too short)");
  f.read(0, 8, &hlen);
  if (hlen > f.size() - 8 || hlen > (256u << 20))
    throw Error("'" + path + "' is truncated or not a safetensors file (header length " + std::to_string(hlen) + ")");
  std::string text(hlen, '\0');
  f.read(8, hlen, text.data());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error("'" + path + "': invalid safetensors header JSON: " + e.what());
  }
  if (!header.is_object()) throw Error("'" + path + "': safetensors header is not a JSON object");
  const uint64_t data_start = 8 + hlen, data_size = f.size() - data_start;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (v.is_object())
        for (auto& [k, s] : v.items()) if (s.is_string()) out.metadata[k] = s.get<std::string>();
      continue;
    }
    const std::string what = "'" + path + "' tensor '" + name + "'";
    try {
      Entry e;
      e.dtype = v.at("dtype").get<std::string>();
      const auto offs = index_list(v.at("data_offsets"), what + ": data_offsets");
      if (offs.size() != 2 || offs[1] < offs[0]) throw Error(what + ": bad data_offsets");
      const size_t es = dtype_size(e.dtype);
      if (!es) throw Error(what + ": unsupported dtype " + e.dtype);
      // The shape's byte size must equal the span; computed without overflow (a span is at most the file size).
      const std::vector<uint64_t> shape = index_list(v.at("shape"), what + ": shape");
      const uint64_t span = offs[1] - offs[0];
      uint64_t bytes = std::count(shape.begin(), shape.end(), 0) ? 0 : es;
      for (uint64_t d : shape) {
        if (d > (uint64_t)INT64_MAX || (bytes != 0 && bytes > span / d))
          throw Error(what + ": shape is larger than its data_offsets span of " + std::to_string(span) + " bytes");
        bytes *= d;
        e.shape.push_back((int64_t)d);
      }
      if (bytes != offs[1] - offs[0])
        throw Error(what + ": data_offsets span " + std::to_string(offs[1] - offs[0]) + " bytes, shape needs " +
                    std::to_string(bytes));
      if (offs[1] > data_size)
        throw Error(what + " extends past the end of the file (truncated?)");
      e.offset = data_start + offs[0];
      e.bytes = offs[1] - offs[0];
      out.tensors[name] = std::move(e);
    } catch (const nlohmann::json::exception& ex) {
      throw Error(what + ": malformed header entry: " + ex.what());
    }
  }
  return out;
}

std::vector<float> File::read_f32(const std::string& name) const {
  const Entry& e = require(name);
  std::vector<uint8_t> raw(e.bytes);
  LocalFile(path).read(e.offset, e.bytes, raw.data());
  std::vector<float> out(e.n_elements());
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = raw.data() + i * dtype_size(e.dtype);
    uint16_t h; double d;
    if (e.dtype == "F32") std::memcpy(&out[i], p, 4);
    else if (e.dtype == "F16") { std::memcpy(&h, p, 2); out[i] = fp16_to_fp32(h); }
    else if (e.dtype == "BF16") { std::memcpy(&h, p, 2); out[i] = bf16_to_fp32(h); }
    else if (e.dtype == "F64") { std::memcpy(&d, p, 8); out[i] = (float)d; }
    else throw Error("tensor '" + name + "' of dtype " + e.dtype + " cannot be read as float");
  }
  return out;
}

std::vector<int64_t> File::read_i64(const std::string& name) const {
  const Entry& e = require(name);
  std::vector<uint8_t> raw(e.bytes);
  LocalFile(path).read(e.offset, e.bytes, raw.data());
  std::vector<int64_t> out(e.n_elements());
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = raw.data() + i * dtype_size(e.dtype);
    if (e.dtype == "I64") std::memcpy(&out[i], p, 8);
    else if (e.dtype == "I32") { int32_t v; std::memcpy(&v, p, 4); out[i] = v; }
    else if (e.dtype == "I16") { int16_t v; std::memcpy(&v, p, 2); out[i] = v; }
    else if (e.dtype == "I8") out[i] = (int8_t)*p;
    else if (e.dtype == "U8" || e.dtype == "BOOL") out[i] = *p;
    else throw Error("tensor '" + name + "' of dtype " + e.dtype + " cannot be read as integers");
  }
  return out;
}

}  // namespace spool::safetensors
