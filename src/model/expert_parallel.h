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
#include <vector>

namespace spool {

// One expert's share of a layer's work: its id and how many rows go to it.
struct ExpertJob {
  int32_t expert = 0;
  int32_t rows = 0;
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
};

}  // namespace spool
