// GGUF reader: parses the header, metadata (every value type, nested arrays)
// and tensor directory of GGUF v2/v3 files, including split models
// (name-00001-of-0000N.gguf), local or http(s):// URLs (read through Storage). Every tensor's type, shape, alignment and extent
// is checked against its file at open; problems throw spool::Error naming the
// file, key or tensor. Tensor data is not read here: the result is a Manifest.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "format/manifest.h"

namespace spool::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Scalars keep their exact integer or float value; arrays
// keep their elements in the vector matching their element type.
struct Value {
  ValueType type = ValueType::UINT32;
  ValueType elem_type = ValueType::UINT32;  // arrays only
  int64_t i = 0;       // signed/unsigned integers and bool
  uint64_t u = 0;      // unsigned integers (exact for UINT64)
  double f = 0;        // floats (and integers, converted)
  std::string s;       // STRING
  std::vector<int64_t> ints;        // integer/bool arrays
  std::vector<double> floats;       // float arrays
  std::vector<std::string> strings; // string arrays
  std::vector<Value> arrays;        // arrays of arrays

  bool is_array() const { return type == ValueType::ARRAY; }
  bool is_integer() const;
  bool is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }
  size_t array_size() const;
  std::string to_string(size_t max_elems = 8) const;  // for `spool inspect`

  // Values made in memory (metadata synthesized from other formats, tests).
  static Value of_int(int64_t x, ValueType t = ValueType::INT64);
  static Value of_float(double x, ValueType t = ValueType::FLOAT64);
  static Value of_bool(bool x);
  static Value of_string(std::string x);
  static Value of_strings(std::vector<std::string> x);
  static Value of_ints(std::vector<int64_t> x, ValueType elem = ValueType::INT32);
};

struct File {
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::map<std::string, Value> kv;  // metadata of the first file
  Manifest manifest;

  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters; throw spool::Error naming the key on a missing key or a type mismatch.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& def) const;
  const Value& get_array(const std::string& key) const;
  std::string architecture() const { return get_string("general.architecture", ""); }
};

// Opens a GGUF file (or the first shard of a split model, which pulls in the
// others). Throws spool::Error on anything malformed.
File open(const std::string& path);

}  // namespace spool::gguf
