// Counters a streaming weight store keeps (totals since load; callers take
// differences for per-token figures): bytes and requests read, cache hits and
// misses per layer, time spent waiting for reads, speculative-prefetch
// accuracy. Plain data; the store fills it under its lock.
#pragma once

#include <cstdint>
#include <vector>

namespace spool {

struct LayerCacheStats {
  uint64_t hits = 0;        // unit was still cached from an earlier use (reuse)
  uint64_t prefetched = 0;  // unit was read ahead (prefetch, next layer, speculation) and had landed
  uint64_t inflight = 0;    // a read ahead was under way: waited for it
  uint64_t misses = 0;      // read on demand
  uint64_t wait_ns = 0;     // time compute waited for this layer's reads (its share of StoreStats::io_wait_ns)
  uint64_t read_ns = 0;     // time storage took to read this layer's units (I/O threads and demand reads alike)
  uint64_t read_bytes = 0;  // bytes read for this layer's units
  uint64_t lookups() const { return hits + prefetched + inflight + misses; }
};

struct StoreStats {
  uint64_t bytes_read = 0;       // bytes this store asked storage for (resident load included)
  uint64_t payload_bytes = 0;    // of those, the tensors' own bytes (bytes_read less alignment padding)
  uint64_t requests = 0;         // Storage::read calls (one per unit) and unaligned tail reads
  uint64_t load_bytes = 0;       // of bytes_read, read at load for the resident set
  uint64_t io_wait_ns = 0;       // time compute threads were blocked in acquire() for a read
  uint64_t verified_bytes = 0;   // bytes checked against MODEL.sums (weights/checksums.h)
  uint64_t verify_ns = 0;        // time those checks took (in the reading threads)
  uint64_t evictions = 0;
  uint64_t read_retries = 0;     // storage requests retried after a transient failure (HTTP)
  uint64_t read_stalls = 0;      // expert lookups that gave up waiting past the read-stall limit (ReadStalled)
  uint64_t prefetch_issued = 0;  // units queued for the I/O threads
  uint64_t prefetch_dropped = 0; // queued units not read (no evictable slot, or already gone)
  uint64_t spec_predicted = 0;   // experts guessed for the next layer
  uint64_t spec_correct = 0;     // of the experts then routed, how many were guessed
  uint64_t spec_routed = 0;      // experts routed in layers that had a guess
  std::vector<LayerCacheStats> layers;  // per layer; the last entry is the non-layer tensors
  uint64_t arena_bytes = 0, resident_bytes = 0, budget_bytes = 0, peak_pinned_bytes = 0;
  int expert_slots = 0, tensor_slots = 0;
  uint64_t expert_slot_bytes = 0, tensor_slot_bytes = 0;
  uint64_t streamed_tensor_bytes = 0;  // non-expert tensors not resident: read again by every pass

  // Over all layers: units needed by compute, and of them those already in memory (cached or read ahead).
  uint64_t lookups() const {
    uint64_t n = 0;
    for (const LayerCacheStats& l : layers) n += l.lookups();
    return n;
  }
  uint64_t hits_total() const {
    uint64_t n = 0;
    for (const LayerCacheStats& l : layers) n += l.hits + l.prefetched;
    return n;
  }
};

}  // namespace spool
