// Scheduler: the step planner as small policy steps (decodes, prefill
// chunks, admission) over shared preemption and block helpers.
#include "runtime/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace spool {

Scheduler::Scheduler(const SchedOptions& options, PagedKvCache& kv) : opt_(options), kv_(kv) {
  const RecurrentState* rs = kv_.recurrent();
  // A recurrent state cannot be rebuilt from shared KV blocks: hybrid models reuse prefixes only through snapshots.
  if (opt_.prefix_cache && (!rs || opt_.state_snapshots > 0)) prefix_ = std::make_unique<PrefixCache>(kv_);
  if (prefix_ && rs) {
    // Snapshots sit at block ends (their key is the block's) and at prefill_align multiples (a restored
    // sequence continues with the chunks it would have had from position 0).
    const int unit = std::max(1, opt_.prefill_align);
    if (opt_.snapshot_interval <= 0 || opt_.snapshot_interval % kv_.block_size() != 0 ||
        opt_.snapshot_interval % unit != 0)
      throw Error("the state snapshot interval (" + std::to_string(opt_.snapshot_interval) +
                  ") must be a positive multiple of the KV block size (" + std::to_string(kv_.block_size()) +
                  ") and of " + std::to_string(unit));
    snapshots_ = std::make_unique<StateSnapshots>(opt_.state_snapshots, opt_.snapshot_interval, state_floats(rs->shape()));
    prefix_->on_forget = [this](uint64_t key) { snapshots_->drop(key); };
  }
  for (int s = opt_.max_running - 1; s >= 0; --s) free_slots_.push_back(s);
}

bool Scheduler::before(const SchedRequest* a, const SchedRequest* b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->arrival < b->arrival;
}

SchedRequest* Scheduler::pick_victim() const {
  SchedRequest* v = nullptr;
  for (SchedRequest* r : running_)
    if (!v || before(v, r)) v = r;
  return v;
}

bool Scheduler::can_ever_fit(const SchedRequest* r) const {
  return blocks_for((int)r->tokens.size() + 1) <= kv_.n_blocks();
}

int Scheduler::chunk_len(const SchedRequest* r, int n) const {
  const int begin = r->n_computed;
  int end = begin + n;
  if (snapshots_) {  // stop at the next snapshot position, to take one there
    const int every = snapshots_->interval();
    end = std::min(end, (begin / every + 1) * every);
  }
  if (end >= (int)r->tokens.size()) return end - begin;  // the last chunk: ends where the tokens end
  if (const int a = opt_.prefill_align; a > 1 && end % a != 0) {
    if (end - end % a > begin) return end - end % a - begin;
    // Less than an aligned piece fits: wait for a step with more room (other requests took this one's),
    // unless no step ever has more (then the chunk is not aligned, and its rounding may differ).
    if (n < opt_.max_batch_tokens && opt_.max_batch_tokens >= a) return 0;
  }
  return end - begin;
}

int Scheduler::snapshot_prefix(const SchedRequest* r, const std::vector<uint64_t>& keys, std::vector<int>& matched,
                               int cached) {
  if (!snapshots_) return cached;
  const int bs = kv_.block_size(), every = snapshots_->interval();
  int p = cached - cached % every;
  for (; p > 0; p -= every) {
    const int b = p / bs - 1;  // the block ending at p
    const uint64_t parent = b > 0 ? keys[b - 1] : PrefixCache::kRoot;
    const int32_t* t = r->tokens.data() + (size_t)b * bs;
    if (snapshots_->has(keys[b], parent, t, bs)) break;
    // The disk tier's snapshot of the state there (a restart, or evicted from memory).
    if (disk_ && disk_->contains(keys[b], KvDiskKind::State)) {
      const std::span<float> dst = snapshots_->insert(keys[b], parent, t, bs, p);
      if (disk_->load(keys[b], parent, {t, (size_t)bs}, {(uint8_t*)dst.data(), dst.size_bytes()}, {},
                      KvDiskKind::State))
        break;
      snapshots_->drop(keys[b]);
    }
  }
  matched.resize(p / bs);
  return p;
}

void Scheduler::take_snapshot(SchedRequest* r, uint64_t parent) {
  const int bs = kv_.block_size(), p = r->n_computed;
  const RecurrentState* rs = kv_.recurrent();
  if (p == 0 || p % snapshots_->interval() != 0 || r->n_indexed * bs != p || !rs->has(r->slot) ||
      rs->n_tokens(r->slot) != p)
    return;
  snapshots_->save(r->last_key, parent, r->tokens.data() + (size_t)(p - bs), bs, p, *rs, r->slot);
  if (disk_ && !disk_->contains(r->last_key, KvDiskKind::State)) {
    const std::span<const float> d = snapshots_->data(r->last_key);
    disk_->store(r->last_key, parent, {r->tokens.data() + (size_t)(p - bs), (size_t)bs},
                 {(const uint8_t*)d.data(), d.size_bytes()}, {}, KvDiskKind::State);
  }
}

void Scheduler::add(SchedRequest* r) {
  waiting_.push_back(r);
  hints_dirty_ = true;
}

void Scheduler::set_hints(uint64_t owner, std::vector<PrefixHint> hints) {
  if (hints.empty()) hint_sets_.erase(owner);
  else hint_sets_[owner] = std::move(hints);
  hints_dirty_ = true;
}

void Scheduler::refresh_hints() {
  if (!prefix_ || !opt_.kv_hints || !hints_dirty_) return;
  hints_dirty_ = false;
  kv_.clear_hints();
  const int bs = kv_.block_size();
  auto apply = [&](const std::vector<int32_t>& tokens, int steps) {
    if (steps <= 0) return;
    for (int b : prefix_->match(tokens, (int)(tokens.size() / bs))) {
      const int h = kv_.hint(b);
      if (h == 0 || steps < h) kv_.set_hint(b, steps);
    }
  };
  for (const SchedRequest* r : waiting_) apply(r->tokens, 1);  // admitted soon: the nearest use
  for (const auto& [owner, hints] : hint_sets_)
    for (const PrefixHint& h : hints) apply(h.tokens, h.steps_until_use);
}

void Scheduler::release(SchedRequest* r) {
  if (r->slot >= 0) {
    kv_.clear(r->slot);
    free_slots_.push_back(r->slot);
    r->slot = -1;
  }
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
}

void Scheduler::remove(SchedRequest* r) {
  release(r);
  hints_dirty_ = true;
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
}

void Scheduler::fail(SchedRequest* r, const std::string& why) {
  r->error = why;
  remove(r);
  failed_.push_back(r);
}

std::vector<SchedRequest*> Scheduler::take_failed() {
  std::vector<SchedRequest*> out;
  out.swap(failed_);
  return out;
}

void Scheduler::preempt(SchedRequest* r, std::vector<StepChunk>& plan, int& budget) {
  for (auto it = plan.begin(); it != plan.end();) {
    if (it->req == r) {
      budget += it->n;
      it = plan.erase(it);
    } else {
      ++it;
    }
  }
  release(r);
  r->n_computed = 0;
  r->n_indexed = 0;
  r->last_key = PrefixCache::kRoot;
  hints_dirty_ = true;
  waiting_.push_back(r);  // its arrival puts it ahead of everyone who came later
  ++preemptions_;
}

bool Scheduler::make_room(SchedRequest* r, int begin, int end, std::vector<StepChunk>& plan, int& budget) {
  while (!kv_.prepare_write(r->slot, begin, end)) {
    SchedRequest* victim = pick_victim();
    if (victim == r && running_.size() == 1) {
      fail(r, "the KV cache pool (" + std::to_string(kv_.n_blocks()) + " blocks of " +
                  std::to_string(kv_.block_size()) + " positions) cannot hold this request's " +
                  std::to_string(end) + " positions");
      return false;
    }
    preempt(victim, plan, budget);
    if (victim == r) return false;
  }
  return true;
}

void Scheduler::schedule_decodes(std::vector<StepChunk>& plan, int& budget) {
  std::vector<SchedRequest*> order = running_;
  std::sort(order.begin(), order.end(), before);
  for (SchedRequest* r : order) {
    if (budget <= 0) break;
    if (r->slot < 0 || r->pending() != 1) continue;  // preempted meanwhile, or still prefilling
    if (make_room(r, r->n_computed, r->n_computed + 1, plan, budget)) {
      plan.push_back({r, r->n_computed, 1, true});
      budget -= 1;
    }
  }
}

void Scheduler::schedule_prefills(std::vector<StepChunk>& plan, int& budget) {
  std::vector<SchedRequest*> order = running_;
  std::sort(order.begin(), order.end(), before);
  for (SchedRequest* r : order) {
    if (budget <= 0) break;
    if (r->slot < 0 || r->pending() <= 1) continue;
    const int n = chunk_len(r, std::min(r->pending(), budget));
    if (n > 0 && make_room(r, r->n_computed, r->n_computed + n, plan, budget)) {
      plan.push_back({r, r->n_computed, n, r->n_computed + n == (int)r->tokens.size()});
      budget -= n;
    }
  }
}

std::unordered_set<uint64_t> Scheduler::inflight_keys() const {
  std::unordered_set<uint64_t> keys;
  if (!prefix_) return keys;
  const int bs = kv_.block_size();
  for (const SchedRequest* r : running_) {
    if (r->pending() <= 1) continue;
    const std::vector<uint64_t> k = prefix_->keys_of(r->tokens);
    for (size_t i = r->n_computed / bs; i < k.size(); ++i) keys.insert(k[i]);
  }
  return keys;
}

void Scheduler::admit_waiting(std::vector<StepChunk>& plan, int& budget) {
  std::sort(waiting_.begin(), waiting_.end(), before);
  std::unordered_set<uint64_t> inflight = inflight_keys();
  const int bs = kv_.block_size();
  const std::vector<SchedRequest*> order = waiting_;
  for (SchedRequest* r : order) {
    if ((int)running_.size() >= opt_.max_running || free_slots_.empty() || budget <= 0) break;
    if (!can_ever_fit(r)) {
      fail(r, "the KV cache pool (" + std::to_string(kv_.n_blocks()) + " blocks of " + std::to_string(bs) +
                  " positions) cannot hold this request's " + std::to_string(r->tokens.size() + 1) + " positions");
      continue;
    }
    // The longest cached run of full blocks; at least the last token is recomputed for its logits.
    std::vector<int> matched;
    std::vector<uint64_t> keys;
    if (prefix_) {
      keys = prefix_->keys_of(r->tokens);
      matched = prefix_->match(r->tokens, (int)keys.size());
      // Another request is computing the next block of this prefix right now: wait for it, then share it.
      if (matched.size() < keys.size() && inflight.count(keys[matched.size()])) continue;
      if (disk_) load_from_disk(r, keys, matched);
    }
    const int n_tok = (int)r->tokens.size();
    const int cached = snapshot_prefix(r, keys, matched, std::min((int)matched.size() * bs, n_tok - 1));
    int revived = 0, revived_unhinted = 0;
    for (int b : matched) {
      revived += kv_.refcount(b) == 0;
      revived_unhinted += kv_.refcount(b) == 0 && kv_.hint(b) == 0;
    }
    const int need = blocks_for(n_tok) - (int)matched.size() + (cached < (int)matched.size() * bs ? 1 : 0);
    if (need > kv_.n_available() - revived) break;  // FCFS: wait for blocks rather than let others pass
    // Workflow-aware retention: while others run (and will free blocks), a request that could start only by
    // evicting blocks a waiting request or a pipeline's next stage will reuse waits, and later requests that
    // fit without doing so go first.
    if (prefix_ && opt_.kv_hints && !running_.empty() &&
        need > kv_.n_free() + kv_.n_cached_unhinted() - revived_unhinted)
      continue;

    r->slot = free_slots_.back();
    free_slots_.pop_back();
    for (int b : matched) kv_.append_shared(r->slot, b);
    if (snapshots_ && n_tok - 1 >= snapshots_->interval()) {
      const int b = cached / bs - 1;
      const bool hit = cached > 0 && snapshots_->restore(keys[b], b > 0 ? keys[b - 1] : PrefixCache::kRoot,
                                                         r->tokens.data() + (size_t)b * bs, bs, *kv_.recurrent(),
                                                         r->slot) == cached;
      SPOOL_CHECK(hit || cached == 0);
      snapshots_->count_lookup(hit);
    }
    r->n_computed = cached;
    r->n_indexed = (int)matched.size();
    r->last_key = matched.empty() ? PrefixCache::kRoot : keys[matched.size() - 1];
    if (!r->admitted_once) {
      r->admitted_once = true;
      r->cached_tokens = cached;
      prefix_hit_tokens_ += cached;
    }
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
    running_.push_back(r);
    for (size_t i = cached / bs; i < keys.size(); ++i) inflight.insert(keys[i]);

    const int n = chunk_len(r, std::min(r->pending(), budget));
    if (n > 0 && make_room(r, r->n_computed, r->n_computed + n, plan, budget)) {
      plan.push_back({r, r->n_computed, n, r->n_computed + n == n_tok});
      budget -= n;
    }
  }
}

bool Scheduler::set_disk_tier(KvDiskTier* disk) {
  if (!prefix_) return false;  // hybrid models have one only with state snapshots, which the tier then saves too
  disk_ = disk;
  if (!disk_) {
    prefix_->on_insert = nullptr;
    return true;
  }
  prefix_->on_insert = [this](uint64_t key, uint64_t parent, const int32_t* tokens, int block) {
    if (!disk_->contains(key))
      disk_->store(key, parent, {tokens, (size_t)kv_.block_size()}, kv_.block_k(block), kv_.block_v(block));
  };
  return true;
}

void Scheduler::load_from_disk(const SchedRequest* r, const std::vector<uint64_t>& keys, std::vector<int>& matched) {
  const int bs = kv_.block_size();
  // Only blocks before the last prompt token: that one is recomputed for its logits anyway.
  const size_t limit = std::min(keys.size(), (size_t)(((int)r->tokens.size() - 1) / bs));
  if (matched.size() >= limit || !disk_->contains(keys[matched.size()])) return;
  // Reads ahead (a window of 64 blocks, sliding) while each block is checked and copied in turn.
  constexpr size_t kAhead = 64;
  disk_->will_load({keys.data() + matched.size(), std::min(kAhead, limit - matched.size())});
  // The matched blocks are pinned while fresh blocks are taken: alloc() may reclaim unreferenced cached blocks.
  for (int b : matched) kv_.ref(b);
  std::vector<int> loaded;
  const size_t first = matched.size();
  for (size_t i = first; i < limit; ++i) {
    if (i + kAhead < limit) disk_->will_load({keys.data() + i + kAhead, 1});  // the window slides
    const uint64_t parent = i == 0 ? PrefixCache::kRoot : keys[i - 1];
    const int32_t* t = r->tokens.data() + i * bs;
    if (prefix_->contains(keys[i])) break;  // indexed under another block (a hash collision): recompute
    const int b = kv_.alloc();
    if (b < 0) break;
    if (!disk_->load(keys[i], parent, {t, (size_t)bs}, kv_.block_k(b), kv_.block_v(b))) {
      kv_.unref(b);
      break;
    }
    prefix_->insert(parent, t, b);
    loaded.push_back(b);
    matched.push_back(b);
  }
  for (int b : matched) kv_.unref(b);  // back to the LRU (most recent) until append_shared takes them
  disk_hit_tokens_ += (uint64_t)loaded.size() * bs;
}

std::vector<StepChunk> Scheduler::plan() {
  std::vector<StepChunk> plan;
  int budget = opt_.max_batch_tokens;
  refresh_hints();
  schedule_decodes(plan, budget);
  schedule_prefills(plan, budget);
  admit_waiting(plan, budget);
  return plan;
}

void Scheduler::commit(const std::vector<StepChunk>& chunks) {
  for (const StepChunk& c : chunks) {
    SPOOL_CHECK(c.req->n_computed == c.begin);
    computed(c.req, c.n - c.n_draft);
  }
}

void Scheduler::commit_accepted(SchedRequest* r, int n) {
  SPOOL_CHECK(n >= 0 && r->n_computed + n <= (int)r->tokens.size());
  computed(r, n);
}

void Scheduler::rollback(SchedRequest* r, int n) {
  SPOOL_CHECK(n >= 0 && n <= r->n_computed);
  r->n_computed = n;
}

int Scheduler::draft_limit(const SchedRequest* r) const {
  if (!snapshots_) return 1 << 30;
  const int every = snapshots_->interval(), next = r->n_computed + 1;  // the pending token's pass ends at next
  return next % every == 0 ? 0 : (next / every + 1) * every - next;
}

bool Scheduler::extend_with_draft(StepChunk& c, int n_draft) {
  SchedRequest* r = c.req;
  if (n_draft <= 0 || c.n_draft != 0 || r->slot < 0 || c.begin + c.n != (int)r->tokens.size()) return false;
  const int end = c.begin + c.n + n_draft;
  if (end > kv_.n_ctx() || !kv_.prepare_write(r->slot, c.begin + c.n, end)) return false;
  c.n += n_draft;
  c.n_draft = n_draft;
  return true;
}

void Scheduler::computed(SchedRequest* r, int n) {
  const int bs = kv_.block_size();
  r->n_computed += n;
  if (!prefix_ || r->slot < 0) return;
  const std::vector<int>& table = kv_.table(r->slot);
  uint64_t parent = r->last_key;
  while ((r->n_indexed + 1) * bs <= r->n_computed) {
    parent = r->last_key;
    r->last_key = prefix_->insert(r->last_key, r->tokens.data() + (size_t)r->n_indexed * bs, table[r->n_indexed]);
    ++r->n_indexed;
    hints_dirty_ = true;  // a new cached block may be one a hint names
  }
  if (snapshots_) take_snapshot(r, parent);
}

}  // namespace spool
