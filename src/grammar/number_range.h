// Numeric JSON Schema bounds as grammars over decimal digits: integers in
// [lo, hi], and numbers (integer part, optional fraction, no exponent)
// between a minimum and a maximum that may have decimals and be exclusive.
// Numerals have at most 16 integer and 16 fraction digits, no leading zeros,
// and never "-0".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace spool::grammar {

// A GBNF expression for the integers in [lo, hi] (lo <= hi, |values| < 1e16).
std::string integer_range_gbnf(int64_t lo, int64_t hi);

struct NumberBound {
  double value = 0;
  bool exclusive = false;
};
// A GBNF expression for the JSON numbers x with lo <= x <= hi (< / > where
// exclusive; nullopt: no bound). Throws GrammarError when no number fits or a
// bound has more than 16 decimal places.
std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace spool::grammar
