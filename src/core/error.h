// Error handling for spool: recoverable failures (bad file, unsupported type,
// bad request) throw spool::Error and are caught at one boundary (the CLI's
// main, later the server's request handler). Broken invariants use SPOOL_CHECK,
// which aborts with the location: they are bugs, not user errors.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace spool {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "spool: internal check failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}

}  // namespace spool

#define SPOOL_CHECK(cond) \
  do { if (!(cond)) ::spool::check_failed(#cond, __FILE__, __LINE__); } while (0)
