// parse_memory_size (core/byte_size.h).
#include "core/byte_size.h"

#include <cctype>

#include "core/error.h"

namespace spool {

uint64_t parse_memory_size(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = s.substr(used);
  for (char& c : unit) c = (char)std::toupper((unsigned char)c);
  if (unit.ends_with("IB")) unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.back() == 'B') unit.pop_back();
  double mul = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0
             : unit == "G" ? 1073741824.0 : unit == "T" ? 1099511627776.0 : 0;
  if (used == 0 || mul == 0 || v <= 0)
    throw Error("invalid size '" + s + "' (expected a positive number with an optional K, M, G or T suffix)");
  return (uint64_t)(v * mul);
}

}  // namespace spool
