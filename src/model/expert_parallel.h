// Expert parallelism, seen from the MoE block: some routed experts of a layer
// are computed by other processes (src/dist/ deals them out and carries the
// rows over MPI). For each layer's pass moe_forward lets it place the selected
// experts (which run here, which elsewhere: the placement may change from pass
// to pass, to balance the processes' work), hands the rows routed to the others
// over before it computes its own, collects their outputs afterwards, and sums
// every expert's output in expert-id order, as one process does, so the result
// does not depend on where an expert ran.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spool {

// One expert's share of a layer's work: its id and how many rows go to it.
struct ExpertJob {
  int32_t expert = 0;
  int32_t rows = 0;
};

// What another process reported with its last answer.
struct ExpertRankStats {
  int rank = 0;
  std::string host;
  uint64_t answers = 0;     // work messages it answered
  uint64_t bytes_read = 0;  // bytes its weight store read (its load included)
  uint64_t lookups = 0;     // expert units its compute asked for ...
  uint64_t hits = 0;        // ... and of them, already in memory (cached or read ahead)
  double io_wait_seconds = 0;   // time its compute waited for reads
  double compute_seconds = 0;   // time it spent on the work (reads included)
};

// The home process's view of expert parallelism, since it started.
struct ExpertParallelStats {
  int ranks = 0;                // processes, this one included
  uint64_t messages = 0;        // work messages sent
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t passes = 0;          // layer passes that waited for other processes
  uint64_t jobs = 0;            // routed-expert jobs placed (one expert of one layer pass)
  uint64_t jobs_home = 0;       // of them, computed here
  uint64_t jobs_moved = 0;      // of them, computed by a process other than the expert's owner (balance)
  double wait_seconds = 0;      // time spent waiting for the other processes' answers
  // Of that, the part beyond the slowest answering process's compute time in
  // each pass: the network's and MPI's share of the token time.
  double network_seconds = 0;
  std::vector<ExpertRankStats> rank;  // the other processes (rank 1 ..)
};

class ExpertParallel {
 public:
  virtual ~ExpertParallel() = default;
  // Places one pass of layer `layer`: `jobs` are the selected experts with
  // their rows, in expert-id order; sets here[i] to 1 when this process
  // computes jobs[i], 0 when another does (those go to the next submit()).
  virtual void place(int layer, const std::vector<ExpertJob>& jobs, std::vector<uint8_t>& here) = 0;
  // Starts the other processes' work on `jobs` (the experts the last place()
  // put elsewhere, in expert-id order) over `input`: their rows one after
  // another, `width` floats each. Returns at once; collect() waits.
  virtual void submit(int layer, int width, const std::vector<ExpertJob>& jobs, const float* input) = 0;
  // The outputs of the last submit: the same rows in the same order, each
  // the expert's SwiGLU output before its router weight ([rows, width]).
  // Throws spool::Error naming the process that failed.
  virtual void collect(std::vector<float>& output) = 0;
  // Counters for /metrics and --stats-json (any thread).
  virtual ExpertParallelStats stats() const = 0;
};

}  // namespace spool
