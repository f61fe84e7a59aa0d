// The serving scheduler: decides, step by step, which tokens of which
// requests go into the next forward pass, and manages their KV blocks.
//
// Per step (plan()): a token budget (max_batch_tokens); running decodes
// first, then the next prefill chunk of partially prefilled requests, then
// admission of waiting requests (priority, then arrival order) while slots,
// budget and free blocks allow, reusing cached prefix blocks. With kv_hints, a
// request that could start only by evicting hinted blocks (ones a waiting
// request or a pipeline's next stage will reuse) waits while others run, and
// later requests that fit without that go first. When the pool
// runs out, the lowest-priority, youngest running request is preempted: its
// blocks are released and it waits again at the front of its priority, to be
// recomputed from its prompt plus what it has generated. A request that
// cannot fit in the pool even alone is failed (take_failed()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime/kv_paged.h"
#include "runtime/kv_disk.h"
#include "runtime/prefix_cache.h"
#include "runtime/state_snapshots.h"

namespace spool {

// What the scheduler knows of a request. The engine's request embeds it.
struct SchedRequest {
  uint64_t id = 0;
  int priority = 0;
  uint64_t arrival = 0;            // submission order
  std::vector<int32_t> tokens;     // prompt, then the generated tokens
  int n_prompt = 0;                // prompt length at submission
  int n_computed = 0;              // leading tokens whose K/V the sequence holds
  int slot = -1;                   // KV sequence id while running
  bool admitted_once = false;
  int cached_tokens = 0;           // prompt tokens served by the prefix cache at first admission
  std::string error;               // set when failed
  // Prefix-cache bookkeeping: blocks [0, n_indexed) of the table are indexed; last_key is the last one's key.
  int n_indexed = 0;
  uint64_t last_key = PrefixCache::kRoot;
  int pending() const { return (int)tokens.size() - n_computed; }
};

struct SchedOptions {
  int max_running = 8;
  int max_batch_tokens = 512;
  bool prefix_cache = true;
  // Workflow-aware retention: cached blocks that a waiting request or a
  // caller's hint (set_hints) will reuse are evicted after the others,
  // farthest next use first. false: plain LRU over cached blocks.
  bool kv_hints = true;
  // Hybrid models (the KV cache has a recurrent state): prefill chunks that do
  // not reach the end of a request's tokens end at a multiple of prefill_align
  // positions (the delta rule's chunk), so a sequence's numbers do not depend
  // on how its prompt was split over steps. 0: no alignment.
  int prefill_align = 0;
  // Hybrid models: the prefix cache is used only with state snapshots
  // (runtime/state_snapshots.h): at most state_snapshots of them, taken every
  // snapshot_interval positions (a multiple of the block size and of prefill_align). 0: no prefix
  // reuse for hybrid models.
  int state_snapshots = 0;
  int snapshot_interval = 256;
};


// One request's rows in a step: tokens [begin, begin + n) of its sequence.
struct StepChunk {
  SchedRequest* req = nullptr;
  int begin = 0, n = 0;
  bool logits = false;  // the chunk reaches the end of the request's tokens: sample after it
  // Speculative decoding: the chunk's last n_draft rows are drafted tokens
  // (the caller's, after the request's tokens), verified with logits on the
  // pending token and each of them. commit() counts only the others;
  // commit_accepted() adds the accepted ones.
  int n_draft = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedOptions& options, PagedKvCache& kv);

  void add(SchedRequest* r);      // joins the waiting queue
  void remove(SchedRequest* r);   // finished or cancelled: leaves the queues, releases its blocks
  // Replaces the retention hints of one owner (an agent run); empty clears
  // them. Block hints are recomputed before the next plan(): each cached block
  // gets the nearest next use among every owner's hints and the waiting
  // requests' prompts (1). No-op without the prefix cache or with kv_hints off.
  void set_hints(uint64_t owner, std::vector<PrefixHint> hints);
  // Plans the next step and makes its KV positions writable.
  std::vector<StepChunk> plan();
  // After the forward pass: advances n_computed and indexes newly full blocks.
  void commit(const std::vector<StepChunk>& chunks);
  // Adds n_draft rows after a decode chunk of the plan, if the pool has the
  // blocks without preempting anyone (false: the chunk is unchanged).
  bool extend_with_draft(StepChunk& c, int n_draft);
  // After commit(): n more positions of r hold the K/V of its tokens (drafted
  // tokens that were accepted and are now among r's tokens).
  void commit_accepted(SchedRequest* r, int n);
  // A hybrid model's verify pass whose drafts were not all accepted: r's
  // recurrent state went back to position n (the caller restored it), so its
  // tokens from n on are computed again (their K/V blocks are kept).
  void rollback(SchedRequest* r, int n);
  // Drafted tokens r may verify in its next decode step at most: hybrid models
  // with state snapshots stop at the next snapshot position (a snapshot is
  // taken where a step ends); otherwise no limit.
  int draft_limit(const SchedRequest* r) const;
  // Requests that can never fit (error set); they are no longer queued.
  std::vector<SchedRequest*> take_failed();

  const std::vector<SchedRequest*>& running() const { return running_; }
  const std::vector<SchedRequest*>& waiting() const { return waiting_; }
  uint64_t preemptions() const { return preemptions_; }
  uint64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  PrefixCache* prefix_cache() { return prefix_.get(); }
  // Saves every newly indexed block to disk and, at admission, extends a
  // prompt's cached run with the blocks found there (runtime/kv_disk.h);
  // hybrid models' state snapshots likewise. Returns false, and does nothing,
  // without a prefix cache (hybrid models: without state snapshots). The tier
  // must outlive the scheduler.
  bool set_disk_tier(KvDiskTier* disk);
  uint64_t disk_hit_tokens() const { return disk_hit_tokens_; }
  const StateSnapshots* snapshots() const { return snapshots_.get(); }

 private:
  // Policy pieces.
  static bool before(const SchedRequest* a, const SchedRequest* b);  // scheduling order
  SchedRequest* pick_victim() const;                               // lowest priority, youngest
  int blocks_for(int n_pos) const { return (n_pos + kv_.block_size() - 1) / kv_.block_size(); }
  bool can_ever_fit(const SchedRequest* r) const;
  // Of n tokens of prefill (n = min(pending, budget)): how many to run now, cut at the next snapshot position
  // and at a prefill_align multiple; 0: wait for a step with more room.
  int chunk_len(const SchedRequest* r, int n) const;
  // Hybrid models: the longest prefix [0, p) with p <= cached at a snapshot position that has a snapshot;
  // matched is cut to its blocks (none when p is 0). Full-attention models: cached unchanged.
  // With the disk tier, a snapshot found only on disk is loaded there.
  int snapshot_prefix(const SchedRequest* r, const std::vector<uint64_t>& keys, std::vector<int>& matched,
                      int cached);
  void take_snapshot(SchedRequest* r, uint64_t parent);
  // Loads blocks [matched.size(), ...) of r's prompt from the disk tier into
  // fresh pool blocks, indexes them and appends them to matched; stops at the
  // first block not on disk (or bad, or no free block).
  void load_from_disk(const SchedRequest* r, const std::vector<uint64_t>& keys, std::vector<int>& matched);
  void schedule_decodes(std::vector<StepChunk>& plan, int& budget);
  void schedule_prefills(std::vector<StepChunk>& plan, int& budget);
  void admit_waiting(std::vector<StepChunk>& plan, int& budget);
  bool admit(SchedRequest* r);  // takes a slot and shares its cached prefix; false if it must wait
  // Makes [begin, end) writable for r, preempting others (or r) if needed; false if r lost its place.
  bool make_room(SchedRequest* r, int begin, int end, std::vector<StepChunk>& plan, int& budget);
  void refresh_hints();  // recomputes the KV blocks' hints when something they depend on changed
  void preempt(SchedRequest* r, std::vector<StepChunk>& plan, int& budget);
  void fail(SchedRequest* r, const std::string& why);
  void release(SchedRequest* r);
  void computed(SchedRequest* r, int n);  // n more positions hold K/V: index full blocks, take snapshots
  std::unordered_set<uint64_t> inflight_keys() const;  // prompt blocks being prefilled now

  SchedOptions opt_;
  PagedKvCache& kv_;
  std::unique_ptr<PrefixCache> prefix_;
  std::unique_ptr<StateSnapshots> snapshots_;  // hybrid models with prefix reuse
  std::vector<SchedRequest*> running_, waiting_, failed_;
  std::vector<int> free_slots_;
  KvDiskTier* disk_ = nullptr;
  uint64_t preemptions_ = 0, prefix_hit_tokens_ = 0, disk_hit_tokens_ = 0;
  std::map<uint64_t, std::vector<PrefixHint>> hint_sets_;  // by owner
  bool hints_dirty_ = false;
};

}  // namespace spool
