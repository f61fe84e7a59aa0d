// Typed config.json key reads (format/config_json.h).
#include "format/config_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace spool::hf::config_json {

using nlohmann::json;

void fail(const std::string& why) { throw Error("config.json: " + why); }

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) fail(std::string("missing '") + key + "'");
  if (!v->is_number()) fail(std::string("'") + key + "' should be a number");
  return v->get<double>();
}

double number(const json& j, const char* key, double def) {
  return field(j, key) ? number(j, key) : def;
}

int64_t integer(const json& j, const char* key) {
  const double x = number(j, key);
  if (x != std::floor(x) || x < 0 || x > 1e12)
    fail(std::string("'") + key + "' should be a non-negative integer");
  return (int64_t)x;
}

int64_t integer(const json& j, const char* key, int64_t def) {
  return field(j, key) ? integer(j, key) : def;
}

}  // namespace spool::hf::config_json
