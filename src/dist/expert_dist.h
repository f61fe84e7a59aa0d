// Expert parallelism over a group of ranks (--dist ep): rank 0, the home
// rank, runs the whole model but for the routed experts dealt to the other
// ranks; each of those loads the same model file (its own copy: local disk
// or HTTP, under its own memory budget and expert cache) and answers the home
// rank's expert work until told to stop. Per MoE layer and forward pass the
// home rank sends each rank that owns a selected expert one message with the
// rows routed to its experts, computes its own experts meanwhile, then takes
// the answers in rank order; moe_forward sums every expert's output in
// expert-id order, so the result equals one process's bit for bit.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "model/expert_parallel.h"

namespace spool {
class Model;
}

namespace spool::dist {

// The rank that owns routed expert `expert` of layer `layer` (computes it
// unless the pass is unbalanced, see place_jobs): dealt out in turn, each
// layer starting one rank further, so that every rank holds an equal share of
// each layer (within one expert).
int expert_owner(int layer, int expert, int n_ranks);

// What a job costs a rank, in rows (one token through one expert):
// `read_rows` for reading the expert's weights (0 when the weights are in
// memory), and `home_rows` that rank 0 spends per layer on its own (streamed
// attention and dense weights), so that it takes fewer experts.
struct PlacementCosts {
  double read_rows = 0;
  double home_rows = 0;
};

// The rank that computes each of one pass's jobs. Every job starts on its
// owner; then, while the most loaded rank (costs above) can give a job to the
// least loaded one and so lower the larger of their loads, it does (the job
// whose move leaves the two closest). Every rank can compute every expert (each
// has the whole file), so a pass whose selected experts crowd on one rank is
// spread over all; an expert mostly stays with its owner, whose cache keeps it.
// Depends only on its arguments.
std::vector<int> place_jobs(int layer, const std::vector<ExpertJob>& jobs, int n_ranks, const PlacementCosts& costs);

// What another rank reported with its last answer: its weight store's
// counters (the experts it read, from disk or cache) and its compute time.
struct RankStats {
  uint64_t answers = 0;        // work messages it answered
  uint64_t bytes_read = 0;     // bytes its weight store read (its load included)
  uint64_t lookups = 0;        // expert/tensor units its compute asked for
  uint64_t hits = 0;           // of them, already in memory (cached or read ahead)
  uint64_t io_wait_ns = 0;     // time its compute waited for reads
  uint64_t compute_ns = 0;     // time it spent on the home rank's work (reads included)
};

class HomeExperts final : public ExpertParallel {
 public:
  // Waits for each other rank to say it loaded the model; throws
  // spool::Error naming the first rank (and host) that could not, after
  // telling every rank to stop.
  explicit HomeExperts(Communicator& comm);
  // Tells the other ranks to stop.
  ~HomeExperts() override;

  void place(int layer, const std::vector<ExpertJob>& jobs, std::vector<uint8_t>& here) override;
  void submit(int layer, int width, const std::vector<ExpertJob>& jobs, const float* input) override;
  void collect(std::vector<float>& output) override;
  ExpertParallelStats stats() const override;

  // The other ranks' last reports, index = rank (index 0 unused).
  std::vector<RankStats> rank_stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return ranks_;
  }
  int n_ranks() const { return comm_.size(); }
  void set_costs(const PlacementCosts& c) { costs_ = c; }
  PlacementCosts costs() const { return costs_; }
  // Sends every other rank the stop message (once).
  void stop();

 private:
  Communicator& comm_;
  bool stopped_ = false;
  PlacementCosts costs_;
  std::vector<int> rank_of_;  // the last place(): the rank of each expert id placed
  // The last submit: for each rank asked, its jobs' (offset in the output, rows).
  std::vector<int> asked_;
  std::vector<std::vector<std::pair<size_t, int32_t>>> placement_;
  size_t pending_rows_ = 0;
  int pending_width_ = 0;
  double submitted_at_ = 0;  // seconds (steady clock) of the last submit
  mutable std::mutex stats_mu_;  // traffic_ and ranks_, read by other threads (stats())
  ExpertParallelStats traffic_;  // the home rank's counters (its `rank` list is filled by stats())
  std::vector<RankStats> ranks_;
};

// A rank other than the home rank: says whether it loaded the model (`model`
// null and `load_error` the reason when not), then computes the routed
// experts the home rank sends until the stop message. Errors while computing
// go back to the home rank as its answer.
void serve_experts(Model* model, Communicator& comm, const std::string& load_error = "");

// Tells ranks 1 .. n - 1 to stop (a home rank that failed before HomeExperts).
void stop_all(Communicator& comm);

}  // namespace spool::dist
