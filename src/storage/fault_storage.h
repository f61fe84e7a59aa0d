// Storage fault injection, for tests and for trying how a deployment behaves
// when its disk or server misbehaves: a Storage that wraps another and, on
// chosen byte ranges, fails reads with EIO, ends them short, delays them or
// corrupts the bytes they deliver.
//
// Turned on by the environment, so it reaches every process that opens a
// model (`spool run`, `spool serve`, tests that exec the CLI):
//   SPOOL_STORAGE_FAULTS="RULE[;RULE...]"
//   RULE   = KIND[=ARG]@BEGIN-END[#COUNT][:FILE]
//   KIND   = eio | short | delay (ARG: milliseconds) | corrupt
// BEGIN-END is a byte range of the file ([BEGIN, END), decimal); a read that
// overlaps it is faulted. #COUNT faults only the first COUNT matching reads
// (a transient fault); without it every one is. :FILE limits the rule to
// sources whose name ends with FILE. Examples:
//   eio@1048576-1052672            every read touching those 4 KiB fails
//   delay=200@0-99999999999#3      the first three reads wait 200 ms
//   corrupt@5000000-5000001:b.gguf one byte of b.gguf arrives flipped
// A malformed spec is an error naming the rule (the process does not start
// with faults silently off).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "storage/storage.h"

namespace spool {

struct FaultRule {
  enum class Kind { Eio, Short, Delay, Corrupt } kind = Kind::Eio;
  uint64_t begin = 0, end = 0;  // [begin, end)
  int delay_ms = 0;
  long count = -1;              // reads still to fault; -1: all
  std::string file;             // suffix of the source name; empty: any
};

// Parses SPOOL_STORAGE_FAULTS syntax; throws spool::Error naming the bad rule.
std::vector<FaultRule> parse_fault_rules(const std::string& spec);

// `inner` with the rules that apply to its name; inner itself when none do.
std::unique_ptr<Storage> with_faults(std::unique_ptr<Storage> inner, const std::vector<FaultRule>& rules);

// The rules of $SPOOL_STORAGE_FAULTS now (empty when unset).
std::vector<FaultRule> env_fault_rules();

}  // namespace spool
