// Digit-by-digit range grammars. A numeral's integer part is compared as a
// number (same-length digit ranges), its fraction digit by digit: a digit
// strictly between the bounds' digits leaves the rest free, a digit equal to
// a bound's keeps that bound on the rest.
#include "grammar/number_range.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "grammar/grammar.h"

namespace spool::grammar {

namespace {

constexpr int kDigits = 16;                        // integer and fraction digits at most
constexpr int64_t kMaxInt = 9999999999999999;      // 16 nines

std::string join_alts(const std::vector<std::string>& alts) {
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

std::string any_digits(int lo, int hi) {
  if (hi <= 0) return "";
  return " [0-9]{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

// Numerals of one length between x and y (as strings, x <= y).
std::string same_length(const std::string& x, const std::string& y) {
  if (x.empty()) return "\"\"";
  const size_t rest = x.size() - 1;
  const auto any = [&](size_t n) { return n ? " [0-9]{" + std::to_string(n) + "}" : std::string(); };
  if (x[0] == y[0]) return "\"" + std::string(1, x[0]) + "\" " + same_length(x.substr(1), y.substr(1));
  if (x.find_first_not_of('0', 1) == std::string::npos && y.find_first_not_of('9', 1) == std::string::npos)
    return "[" + std::string(1, x[0]) + "-" + std::string(1, y[0]) + "]" + any(rest);
  std::vector<std::string> alts;
  alts.push_back("\"" + std::string(1, x[0]) + "\" " + same_length(x.substr(1), std::string(rest, '9')));
  if (x[0] + 1 <= y[0] - 1)
    alts.push_back("[" + std::string(1, (char)(x[0] + 1)) + "-" + std::string(1, (char)(y[0] - 1)) + "]" + any(rest));
  alts.push_back("\"" + std::string(1, y[0]) + "\" " + same_length(std::string(rest, '0'), y.substr(1)));
  return join_alts(alts);
}

// Decimal numerals (no leading zeros) of the integers in [a, b], 0 <= a <= b.
std::string digits_range(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  int64_t pow = 1;
  for (int len = 1; len <= kDigits; ++len, pow *= 10) {
    const int64_t first = len == 1 ? 0 : pow, last = pow * 10 - 1;
    const int64_t x = std::max(a, first), y = std::min(b, last);
    if (x > y) continue;
    alts.push_back(same_length(std::to_string(x), std::to_string(y)));
  }
  return join_alts(alts);
}

// Fraction digit strings d (value 0.d; empty d is 0) of length <= k with
// lo <(=) 0.d <(=) hi, hi absent: no upper bound below 1. Bounds are digit
// strings. `empty`: d may be empty; `nonempty`: an expression for the others ("" none).
struct Fraction {
  bool empty = false;
  std::string nonempty;
};

bool zero(const std::string& digits) { return digits.find_first_not_of('0') == std::string::npos; }

Fraction fraction(const std::string& lo, bool lo_strict, const std::optional<std::string>& hi, bool hi_strict, int k) {
  Fraction f;
  f.empty = zero(lo) && !lo_strict && !(hi && zero(*hi) && hi_strict);
  if (k == 0) return f;
  if (f.empty && !hi) return Fraction{true, "[0-9]" + any_digits(0, k - 1)};  // no bound left
  const int L = lo.empty() ? 0 : lo[0] - '0';
  const int H = !hi ? 10 : hi->empty() ? 0 : (*hi)[0] - '0';
  std::vector<std::string> alts;
  if (L + 1 <= std::min(H - 1, 9))
    alts.push_back("[" + std::to_string(L + 1) + "-" + std::to_string(std::min(H - 1, 9)) + "]" + any_digits(0, k - 1));
  std::vector<int> tight{L};  // digits equal to a bound's keep that bound on the rest
  if (H <= 9 && H != L) tight.push_back(H);
  for (int c : tight) {
    if (c < L || c > H) continue;
    const bool low_tight = c == L, high_tight = c == H;
    const std::string lo_rest = low_tight && !lo.empty() ? lo.substr(1) : "";
    const std::optional<std::string> hi_rest =
        high_tight ? std::optional<std::string>(hi->empty() ? "" : hi->substr(1)) : std::nullopt;
    const Fraction r = fraction(lo_rest, low_tight && lo_strict, hi_rest, high_tight && hi_strict, k - 1);
    const std::string digit = "\"" + std::to_string(c) + "\"";
    if (r.empty && !r.nonempty.empty()) alts.push_back(digit + " (" + r.nonempty + ")?");
    else if (r.empty) alts.push_back(digit);
    else if (!r.nonempty.empty()) alts.push_back(digit + " " + r.nonempty);
  }
  if (!alts.empty()) f.nonempty = alts.size() == 1 ? alts[0] : join_alts(alts);
  return f;
}

// "." digits where the fraction allows them; nullopt when no fraction fits.
std::optional<std::string> fraction_suffix(const Fraction& f) {
  if (f.nonempty.empty()) return f.empty ? std::optional<std::string>("") : std::nullopt;
  const std::string dotted = "\".\" " + f.nonempty;
  return f.empty ? " (" + dotted + ")?" : " " + dotted;
}

// A bound as an integer part (capped at 16 nines) and fraction digits.
struct Decimal {
  int64_t integer = 0;
  std::string fraction;  // no trailing zeros
  bool beyond = false;   // >= 1e16: past every numeral the grammar writes
};

Decimal decimal(double v, const char* what) {
  Decimal d;
  v = std::fabs(v);
  if (v >= 1e16) {
    d.beyond = true;
    d.integer = kMaxInt;
    return d;
  }
  char buf[512];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  const std::string s(buf, r.ptr);
  const size_t dot = s.find('.');
  d.integer = std::stoll(s.substr(0, dot));
  if (dot != std::string::npos) {
    d.fraction = s.substr(dot + 1);
    d.fraction.erase(d.fraction.find_last_not_of('0') + 1);
  }
  if ((int)d.fraction.size() > kDigits)
    throw GrammarError(std::string(what) + " " + s + " has more than 16 decimal places");
  return d;
}

// Unsigned numerals y with lo <(=) y <(=) hi (hi absent: no upper bound).
std::vector<std::string> unsigned_range(const Decimal& lo, bool lo_strict, const std::optional<Decimal>& hi,
                                        bool hi_strict) {
  std::vector<std::string> alts;
  const auto add = [&](const std::string& integer, const Fraction& f) {
    if (const auto suffix = fraction_suffix(f)) alts.push_back(integer + *suffix);
  };
  const auto int_literal = [](int64_t x) { return "\"" + std::to_string(x) + "\""; };
  if (lo.beyond) return alts;
  if (hi && hi->integer < lo.integer) return alts;
  if (hi && !hi->beyond && hi->integer == lo.integer) {
    add(int_literal(lo.integer), fraction(lo.fraction, lo_strict, hi->fraction, hi_strict, kDigits));
    return alts;
  }
  add(int_literal(lo.integer), fraction(lo.fraction, lo_strict, std::nullopt, false, kDigits));
  const int64_t top = hi && !hi->beyond ? hi->integer - 1 : kMaxInt;
  if (lo.integer + 1 <= top) add(digits_range(lo.integer + 1, top), Fraction{true, "[0-9]" + any_digits(0, kDigits - 1)});
  if (hi && !hi->beyond) add(int_literal(hi->integer), fraction("", false, hi->fraction, hi_strict, kDigits));
  return alts;
}

}  // namespace

std::string integer_range_gbnf(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) alts.push_back("\"-\" " + digits_range(std::max<int64_t>(1, -std::min<int64_t>(hi, -1)), -lo));
  if (hi >= 0) alts.push_back(digits_range(std::max<int64_t>(0, lo), hi));
  std::string body;
  for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
  return body;
}

std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  std::vector<std::string> alts;
  const Decimal zero_bound;
  // x >= 0, written without a sign.
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    const bool from_lo = lo && lo->value >= 0;
    const std::optional<Decimal> top = hi ? std::optional<Decimal>(decimal(hi->value, "maximum")) : std::nullopt;
    for (std::string& a : unsigned_range(from_lo ? decimal(lo->value, "minimum") : zero_bound,
                                         from_lo && lo->exclusive, top, hi && hi->exclusive))
      alts.push_back(std::move(a));
  }
  // x < 0, written "-" y with y > 0 (never "-0").
  if (!lo || lo->value < 0) {
    const bool from_hi = hi && hi->value < 0;
    const std::optional<Decimal> top = lo ? std::optional<Decimal>(decimal(lo->value, "minimum")) : std::nullopt;
    std::vector<std::string> neg = unsigned_range(from_hi ? decimal(hi->value, "maximum") : zero_bound,
                                                  from_hi ? hi->exclusive : true, top, lo && lo->exclusive);
    if (!neg.empty()) alts.push_back("\"-\" " + (neg.size() == 1 ? neg[0] : join_alts(neg)));
  }
  if (alts.empty()) throw GrammarError("no number lies between the minimum and the maximum");
  return alts.size() == 1 ? alts[0] : join_alts(alts);
}

}  // namespace spool::grammar
