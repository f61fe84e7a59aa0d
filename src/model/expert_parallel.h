// Expert parallelism, seen from the MoE block: some routed experts of a layer
// are computed by other processes (src/dist/ deals them out and carries the
// rows over MPI). moe_forward asks which experts are computed here, hands the
// rows routed to the others over before it computes its own, collects their
// outputs afterwards, and sums every expert's output in expert-id order, as
// one process does, so the result does not depend on where an expert ran.
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
  // Whether this process computes routed expert `expert` of layer `layer`.
  virtual bool local(int layer, int expert) const = 0;
  // Starts the other processes' work on `jobs` (experts not local, in
  // expert-id order) over `input`: their rows one after another, `width`
  // floats each. Returns at once; collect() waits.
  virtual void submit(int layer, int width, const std::vector<ExpertJob>& jobs, const float* input) = 0;
  // The outputs of the last submit: the same rows in the same order, each
  // the expert's SwiGLU output before its router weight ([rows, width]).
  // Throws spool::Error naming the process that failed.
  virtual void collect(std::vector<float>& output) = 0;
};

}  // namespace spool
