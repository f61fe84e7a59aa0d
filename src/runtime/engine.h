// The serving engine: many requests over one model at once. Requests are
// submitted from any thread (the HTTP server, the pipeline runtime, tests);
// one scheduler thread runs continuous batching over a paged KV cache with
// prefix sharing, and reports each request's progress through its callback.
//
// Scheduling (runtime/scheduler.*): a token budget per step, running decodes
// first, then chunked prefill of waiting requests (FCFS within priority);
// when KV blocks run out a running request is preempted (its blocks freed, it
// is recomputed later), never a crash. A step's batch goes through
// Model::forward once, so each weight is read once per step for all sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "grammar/token_mask.h"
#include "model/model.h"
#include "runtime/latency_histogram.h"
#include "runtime/kv_disk.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace spool {

using RequestId = uint64_t;

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct RequestParams {
  std::vector<int32_t> prompt;        // token ids, BOS included when the model wants one
  int max_tokens = 256;               // generated tokens at most (context permitting)
  SamplingParams sampling;
  std::vector<std::string> stop;      // stop strings (never part of the returned text)
  bool ignore_eos = false;
  int top_logprobs = -1;              // -1: no logprobs; 0..20: the chosen token's logprob and this many alternatives
  int priority = 0;                   // higher first; FCFS within a priority
  // Constrained decoding: each sampled token is one the grammar allows (its
  // mask is applied before sampling), EOS only where the grammar may end, and
  // the request finishes with "stop" as soon as the grammar is complete.
  // Built for this model's vocabulary (grammar::GrammarCache); null: free text.
  std::shared_ptr<grammar::TokenMasker> grammar;
  // Speculative decoding (EngineOptions::spec): token sequences this request
  // may draft from besides its own tokens (an agent run's other prompts and
  // outputs, which its text often copies). false: never draft for it.
  std::vector<std::shared_ptr<const DraftContext>> draft_contexts;
  bool speculate = true;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// One callback per step in which the request made progress, on the engine thread.
// Keep it short (queue the event for the HTTP connection, do not block).
struct RequestEvent {
  RequestId id = 0;
  std::vector<int32_t> tokens;        // tokens sampled in this step (usually one)
  std::string text;                   // new text, UTF-8 complete, stop strings held back/removed
  std::vector<TokenLogprob> logprobs; // chosen token per token, when asked
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // alternatives per token, when asked
  bool finished = false;
  FinishReason reason = FinishReason::None;
  std::string error;                  // reason == Error
  // Filled on the finishing event:
  int prompt_tokens = 0;
  int cached_tokens = 0;              // prompt tokens served from the prefix cache
  int completion_tokens = 0;
};
using RequestCallback = std::function<void(const RequestEvent&)>;

struct EngineOptions {
  int n_ctx = 4096;             // positions per request at most
  int max_running = 8;          // sequences decoded together at most (--parallel)
  int max_batch_tokens = 512;   // tokens per step (decodes + prefill chunks)
  int max_waiting = 64;         // queue length; submit() throws QueueFull beyond it
  int block_size = 16;          // KV positions per block
  uint64_t kv_bytes = 0;        // KV pool size; 0: enough for max_running full contexts
  bool prefix_cache = true;
  // Hybrid models: prefix reuse through snapshots of the recurrent state taken
  // every snapshot_interval positions (a multiple of block_size), at most
  // state_snapshots of them (each one full state: count them in the memory
  // budget); 0: hybrid models compute every prompt in full.
  int state_snapshots = 0;
  int snapshot_interval = 256;
  bool kv_hints = true;  // workflow-aware KV retention (SchedOptions::kv_hints); false: plain LRU
  // Streamed MoE models: a pass waiting longer than this (ms) for an expert's
  // read sets the requests routed to it aside until the read lands and goes on
  // with the others (WeightStore::set_read_stall_ms); 0: every pass waits.
  int read_stall_ms = 0;
  // KV disk tier (runtime/kv_disk.h): full prefix blocks saved under this
  // directory and loaded instead of recomputed, across evictions and
  // restarts; "" = off. Its files are kept within kv_disk_bytes. Models with
  // a recurrent state (hybrid) use it with state_snapshots > 0 (the snapshots
  // are saved too).
  std::string kv_disk_dir;
  uint64_t kv_disk_bytes = 0;
  // Speculative decoding (runtime/speculative.h): n-gram drafts verified in
  // the decode step, with the governor deciding per step (Auto).
  SpecOptions spec;
  // A draft model (runtime/draft_model.h): a smaller attention-only model of
  // the same vocabulary (check_draft_model) drafting besides n-gram lookup.
  // Not owned: it must outlive the engine and be used by nothing else while
  // the engine runs (the engine thread computes with it). Null: n-gram only.
  Model* draft_model = nullptr;
};

struct EngineStats {
  int running = 0, waiting = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  uint64_t prefix_hit_tokens = 0;     // prompt tokens not recomputed thanks to the prefix cache
  uint64_t computed_tokens = 0;       // positions run through the model: prefill, decode, recomputation
  int kv_blocks_total = 0;
  int kv_blocks_used = 0;             // held by requests (running or preempted)
  int kv_blocks_cached = 0;           // unreferenced but kept for prefix reuse
  uint64_t kv_bytes = 0;              // the KV pool's size (reserved up front; count it in the memory budget)
  uint64_t preemptions = 0;
  uint64_t requests_finished = 0;
  // Hybrid models (linear-attention layers): per-sequence recurrent state held
  // now, and how many sequences hold one. A state cannot be rebuilt from shared
  // KV blocks, so their prefix cache works only with state snapshots
  // (EngineOptions::state_snapshots; docs/ARCHITECTURE.md): snapshots held,
  // their bytes, and admissions that restored one (hits) or found none (misses).
  uint64_t recurrent_state_bytes = 0;
  int recurrent_sequences = 0;
  int state_snapshots = 0;
  uint64_t state_snapshot_bytes = 0;
  uint64_t state_snapshot_hits = 0, state_snapshot_misses = 0;
  bool prefix_cache = false;          // prefix reuse in effect
  bool kv_disk = false;               // the KV disk tier in effect
  uint64_t kv_disk_hit_tokens = 0;    // prompt tokens whose KV was loaded from disk
  KvDiskStats kv_disk_stats;
  SpecStats spec;                     // speculative decoding
  // Latencies since start, seconds: time to first token, time between tokens.
  LatencyHistogram ttft{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  LatencyHistogram inter_token{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
};

class QueueFull : public std::runtime_error { using std::runtime_error::runtime_error; };
class InvalidRequest : public std::runtime_error { using std::runtime_error::runtime_error; };  // e.g. prompt longer than n_ctx

class Engine {
 public:
  virtual ~Engine() = default;
  // Thread-safe. Throws InvalidRequest (empty prompt, prompt + 1 > n_ctx, bad
  // parameters) or QueueFull; otherwise the callback will see exactly one
  // finished event.
  virtual RequestId submit(RequestParams params, RequestCallback callback) = 0;
  // Thread-safe; the request finishes with FinishReason::Cancelled and its
  // blocks are released. Unknown or finished ids are ignored.
  virtual void cancel(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
  // Thread-safe hints from a caller that knows its workflow (the agent
  // runtime): the cached KV blocks of these prompt prefixes will be reused in
  // about `steps_until_use` steps, so eviction takes other cached blocks first
  // (farthest next use first) instead of plain LRU. Replaces `owner`'s earlier
  // hints (empty: clears them); applied at the next scheduler step, to blocks
  // cached then or later. Scheduler::set_hints has the rules.
  virtual void set_hints(uint64_t owner, std::vector<PrefixHint> hints) {
    (void)owner;
    (void)hints;
  }
  virtual Model& model() = 0;
  virtual const EngineOptions& options() const = 0;
};

// Starts the scheduler thread; it stops (cancelling what is left) when the
// engine is destroyed.
std::unique_ptr<Engine> make_engine(Model& model, const EngineOptions& options);

}  // namespace spool
