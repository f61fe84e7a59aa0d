// Per-token and total figures of a run for --stats-json and the live progress
// line: wall time, bytes read, requests, cache hits per layer, I/O wait,
// compute time, speculative-prefetch accuracy, peak RSS. Reads the weight
// store's counters (weights/store_stats.h) before and after each step.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/expert_parallel.h"
#include "model/model.h"

namespace spool::cli {

class StatsRecorder {
 public:
  explicit StatsRecorder(Model& model);
  void begin_step();
  // A forward step of n_tokens tokens ("prompt" or "decode") has finished.
  void end_step(const char* phase, int n_tokens);
  // The JSON: store configuration, totals, per layer, per token; `extra` merged at the top level.
  nlohmann::json to_json(const nlohmann::json& extra = {}) const;
  void write_json(const std::string& path, const nlohmann::json& extra = {}) const;
  void end_progress() const;  // ends the live line

 private:
  Model& model_;
  bool tty_ = false;
  StoreStats start_, before_;
  ExpertParallelStats dist_before_;  // --dist ep: the home rank's counters before the step
  double t_begin_ = 0, t_start_ = 0;
  nlohmann::json steps_ = nlohmann::json::array();
  uint64_t total_tokens_ = 0;
  bool progressed_ = false;
};

// Peak resident set size of this process (VmHWM), bytes.
uint64_t peak_rss_bytes();

}  // namespace spool::cli
