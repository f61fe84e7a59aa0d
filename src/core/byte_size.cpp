// parse_memory_size and parse_byte_size (core/byte_size.h).
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

uint64_t parse_byte_size(const std::string& text) {
  std::string s;
  for (char c : text)
    if (c != ' ') s += (char)std::toupper((unsigned char)c);
  if (!s.empty() && s.back() == 'B') s.pop_back();
  if (!s.empty() && s.back() == 'I') s.pop_back();
  double mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': mult = 1024.0; break;
      case 'M': mult = 1048576.0; break;
      case 'G': mult = 1073741824.0; break;
      case 'T': mult = 1099511627776.0; break;
      default: break;
    }
    if (mult != 1) s.pop_back();
  }
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  if (s.empty() || used != s.size() || !(x > 0))
    throw Error("cannot read the size '" + text + "' (examples: 24G, 512M, 3.5GiB, 1000000)");
  return (uint64_t)(x * mult);
}

}  // namespace spool
