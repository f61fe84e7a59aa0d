// A fixed-bucket latency histogram (Prometheus style): the engine counts TTFT
// and inter-token samples into one as they happen, so a long-running server
// keeps a constant amount of state however many tokens it generates.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace spool {

class LatencyHistogram {
 public:
  LatencyHistogram() = default;
  // Upper bounds of the buckets, seconds, increasing; +Inf is implicit.
  explicit LatencyHistogram(std::initializer_list<double> bounds) : bounds_(bounds), counts_(bounds.size() + 1, 0) {}

  void add(double seconds) {
    size_t b = 0;
    while (b < bounds_.size() && seconds > bounds_[b]) ++b;
    ++counts_[b];
    sum_ += seconds;
    ++count_;
  }

  // Adds another histogram's samples (same bounds: the engine's are fixed).
  void merge(const LatencyHistogram& o) {
    if (counts_.empty()) {
      *this = o;
      return;
    }
    for (size_t b = 0; b < counts_.size() && b < o.counts_.size(); ++b) counts_[b] += o.counts_[b];
    sum_ += o.sum_;
    count_ += o.count_;
  }

  const std::vector<double>& bounds() const { return bounds_; }
  // Samples <= bounds()[i] (cumulative, as Prometheus buckets are).
  uint64_t cumulative(size_t i) const {
    uint64_t n = 0;
    for (size_t b = 0; b <= i && b < counts_.size(); ++b) n += counts_[b];
    return n;
  }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, the last one above every bound
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace spool
