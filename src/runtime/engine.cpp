// The serving engine: a scheduler thread that runs continuous batching over a
// paged KV cache. Each step: take new submissions and cancellations, let the
// scheduler plan the step, run one Model::forward over every planned row,
// then sample, detokenize and report per request.
#include "runtime/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "kernels/matmul.h"
#include "runtime/draft_model.h"
#include "runtime/kv_paged.h"
#include "runtime/scheduler.h"
#include "text/text_stream.h"

namespace spool {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    case FinishReason::None: break;
  }
  return "none";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Request : SchedRequest {
  RequestParams params;
  RequestCallback callback;
  Sampler sampler;
  std::optional<grammar::GrammarState> grammar;  // params.grammar's position for this sequence
  TextStream stream;
  int completion_tokens = 0;
  Clock::time_point submitted, last_token;
  SpecSequence spec;            // its drafts and acceptance (speculative decoding)
  std::vector<int32_t> draft;   // drafted tokens verified in this step
  DraftSource draft_src = DraftSource::Ngram;
  // Hybrid models: the recurrent state before this step's verify pass, and
  // where recomputation after a rejected draft ends (its rows fold in one
  // token at a time, as the verify pass did).
  std::vector<float> state_backup;
  int state_backup_tokens = -1;
  int stepwise_until = 0;
  Request(RequestParams p, RequestCallback cb, int n_vocab, const SpecOptions& so)
      : params(std::move(p)), callback(std::move(cb)), sampler(params.sampling, n_vocab), stream(params.stop),
        spec(so) {
    if (params.grammar) grammar.emplace(params.grammar);
    spec.set_contexts(params.draft_contexts);
  }
};

// log-softmax of one row: the chosen token's logprob and the top-k alternatives.
void fill_logprobs(const float* logits, int n_vocab, int32_t chosen, int top, RequestEvent& ev) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp((double)logits[i] - mx);
  const float lse = mx + (float)std::log(sum);
  ev.logprobs.push_back({chosen, logits[chosen] - lse});
  std::vector<TokenLogprob> alts;
  if (top > 0) {
    std::vector<int32_t> ids(n_vocab);
    for (int i = 0; i < n_vocab; ++i) ids[i] = i;
    const int k = std::min(top, n_vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int i = 0; i < k; ++i) alts.push_back({ids[i], logits[ids[i]] - lse});
  }
  ev.top_logprobs.push_back(std::move(alts));
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(Model& model, const EngineOptions& options) : model_(model), opt_(options) {
    if (opt_.n_ctx <= 0 || opt_.max_running <= 0 || opt_.max_batch_tokens <= 0 || opt_.max_waiting < 0 ||
        opt_.block_size <= 0)
      throw Error("engine options: n_ctx, max_running, max_batch_tokens and block_size must be positive");
    if (opt_.state_snapshots < 0) throw Error("engine options: state_snapshots must not be negative");
    if (opt_.spec.max_draft < 0 || opt_.spec.max_draft > 64)
      throw Error("engine options: the speculative draft length must be between 0 and 64");
    const KvShape shape = model.kv_shape();
    const uint64_t bb = PagedKvCache::block_bytes(shape, opt_.block_size);
    const int blocks_per_ctx = (opt_.n_ctx + opt_.block_size - 1) / opt_.block_size;
    uint64_t n_blocks = opt_.kv_bytes ? opt_.kv_bytes / bb : (uint64_t)blocks_per_ctx * opt_.max_running;
    if (n_blocks < 1)
      throw Error("engine options: kv_bytes " + std::to_string(opt_.kv_bytes) + " is smaller than one KV block (" +
                  std::to_string(bb) + " bytes)");
    // State snapshots (hybrid models) come out of the KV pool's bytes, so the memory the budget reserved for
    // KV (--kv-pool, or --parallel full contexts) holds blocks and snapshots together.
    if (!shape.recurrent.empty() && opt_.prefix_cache && opt_.state_snapshots > 0) {
      const uint64_t snap = (uint64_t)opt_.state_snapshots * shape.recurrent.bytes_per_seq();
      const uint64_t taken = (snap + bb - 1) / bb;
      if (taken + blocks_per_ctx > n_blocks)
        throw Error("engine options: " + std::to_string(opt_.state_snapshots) + " state snapshots take " +
                    std::to_string(snap >> 20) + " MiB of the KV pool (" + std::to_string((n_blocks * bb) >> 20) +
                    " MiB), which then holds less than one context of " + std::to_string(opt_.n_ctx) +
                    " positions: give fewer snapshots or a larger KV pool");
      n_blocks -= taken;
    }
    kv_ = std::make_unique<PagedKvCache>(shape, opt_.block_size, (int)n_blocks, opt_.n_ctx, opt_.max_running);
    SchedOptions so;
    so.max_running = opt_.max_running;
    so.max_batch_tokens = opt_.max_batch_tokens;
    // A recurrent state folds in every token before it and cannot be rebuilt
    // from shared KV blocks: hybrid models reuse a prefix only where a snapshot
    // of the state at its end exists, and compute every prompt in full without.
    const bool hybrid = !shape.recurrent.empty();
    so.prefix_cache = opt_.prefix_cache && (!hybrid || opt_.state_snapshots > 0);
    so.state_snapshots = hybrid ? opt_.state_snapshots : 0;
    so.snapshot_interval = opt_.snapshot_interval;
    // Prefill chunks end at multiples of the delta rule's chunk (64 tokens, in
    // gdn_model and kda), so a prompt's numbers do not depend on how it was
    // split over steps or whether it started from a snapshot.
    so.prefill_align = hybrid ? 64 : 0;
    stats_.prefix_cache = so.prefix_cache;
    so.kv_hints = opt_.kv_hints;
    sched_ = std::make_unique<Scheduler>(so, *kv_);
    if (!opt_.kv_disk_dir.empty()) {
      if (!so.prefix_cache) {
        std::fprintf(stderr, "spool: kv-disk: off (%s)\n",
                     hybrid ? "a model with a recurrent state needs --state-snapshots for it" : "the prefix cache is off");
      } else {
        disk_ = make_kv_disk_tier(model_, opt_.kv_disk_dir, opt_.kv_disk_bytes, opt_.block_size);
        sched_->set_disk_tier(disk_.get());
        stats_.kv_disk = true;
        stats_.kv_disk_stats = disk_->stats();
      }
    }
    // Drafts need a pass whose rejected positions can be dropped: attention K/V is simply overwritten later; a
    // recurrent state (hybrid models) is saved before the pass and restored, and the accepted tokens recomputed.
    spec_on_ = opt_.spec.mode != SpecMode::Off && opt_.spec.max_draft > 0;
    stats_.spec.mode = spec_on_ ? opt_.spec.mode : SpecMode::Off;
    stats_.spec.max_draft = spec_on_ ? opt_.spec.max_draft : 0;
    if (spec_on_ && opt_.draft_model) {
      check_draft_model(model_, *opt_.draft_model);
      drafter_ = std::make_unique<DraftModel>(*opt_.draft_model, model_.config().n_vocab, opt_.n_ctx, opt_.max_running);
      stats_.spec.draft_model = true;
    }
    stats_.kv_blocks_total = kv_->n_blocks();
    stats_.kv_bytes = kv_->bytes_allocated();
    thread_ = std::thread([this] { loop(); });
  }

  ~EngineImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  RequestId submit(RequestParams params, RequestCallback callback) override {
    validate(params);
    auto r = std::make_unique<Request>(std::move(params), std::move(callback), model_.config().n_vocab, opt_.spec);
    r->tokens = r->params.prompt;
    r->n_prompt = (int)r->tokens.size();
    r->priority = r->params.priority;
    r->submitted = Clock::now();
    for (int32_t t : r->tokens) r->sampler.accept(t);
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) throw InvalidRequest("the engine is shutting down");
    if ((int)incoming_.size() + n_waiting_ >= opt_.max_waiting)
      throw QueueFull("request queue full (" + std::to_string(opt_.max_waiting) + " waiting)");
    r->id = r->arrival = ++next_id_;
    const RequestId id = r->id;
    incoming_.push_back(std::move(r));
    cv_.notify_all();
    return id;
  }

  void cancel(RequestId id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancels_.insert(id);
    }
    cv_.notify_all();
  }

  void set_hints(uint64_t owner, std::vector<PrefixHint> hints) override {
    std::lock_guard<std::mutex> lock(mu_);
    hints_.emplace_back(owner, std::move(hints));
    // Applied at the next intake (no wake-up needed: an idle engine has nothing to evict).
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(stats_mu_);
    EngineStats s = stats_;
    if (disk_) s.kv_disk_stats = disk_->stats();  // live: its writer runs after the steps that queued the blocks
    return s;
  }
  Model& model() override { return model_; }
  const EngineOptions& options() const override { return opt_; }

 private:
  void validate(const RequestParams& p) const {
    const int n_vocab = model_.config().n_vocab;
    if (p.prompt.empty()) throw InvalidRequest("the prompt is empty");
    if ((int)p.prompt.size() + 1 > opt_.n_ctx)
      throw InvalidRequest("the prompt has " + std::to_string(p.prompt.size()) +
                           " tokens; with one generated token that exceeds the context size " +
                           std::to_string(opt_.n_ctx));
    for (int32_t t : p.prompt)
      if (t < 0 || t >= n_vocab)
        throw InvalidRequest("prompt token id " + std::to_string(t) + " is out of range (vocab " +
                             std::to_string(n_vocab) + ")");
    if (p.max_tokens < 0) throw InvalidRequest("max_tokens must not be negative");
    if (p.top_logprobs < -1 || p.top_logprobs > 20) throw InvalidRequest("top_logprobs must be between 0 and 20");
    if (!(p.sampling.temperature >= 0)) throw InvalidRequest("temperature must not be negative");
    if (!(p.sampling.top_p > 0)) throw InvalidRequest("top_p must be positive");
    for (const auto& [id, bias] : p.sampling.logit_bias)
      if (id < 0 || id >= n_vocab || !std::isfinite(bias))
        throw InvalidRequest("logit_bias entry for token " + std::to_string(id) +
                             " is invalid (ids must be in the vocabulary of " + std::to_string(n_vocab) +
                             " tokens, biases finite)");
  }

  // Moves submissions into the scheduler and handles cancellations; waits when idle.
  bool intake() {
    std::vector<std::unique_ptr<Request>> fresh;
    std::unordered_set<RequestId> cancels;
    std::vector<std::pair<uint64_t, std::vector<PrefixHint>>> hints;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stop_ || !incoming_.empty() || !cancels_.empty(); };
      if (requests_.empty()) cv_.wait(lock, ready);
      else if (idle_) cv_.wait_for(lock, std::chrono::milliseconds(20), ready);  // nothing could run last step
      if (stop_) return false;
      while (!incoming_.empty()) {
        fresh.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      n_waiting_ += (int)fresh.size();  // still queued (in the scheduler) until the next stats publication
      cancels.swap(cancels_);
      hints.swap(hints_);
    }
    for (auto& [owner, h] : hints) sched_->set_hints(owner, std::move(h));
    for (auto& r : fresh) {
      sched_->add(r.get());
      const RequestId id = r->id;
      requests_.emplace(id, std::move(r));
    }
    for (RequestId id : cancels) {
      auto it = requests_.find(id);
      if (it != requests_.end()) finish(*it->second, FinishReason::Cancelled, RequestEvent{});
    }
    return true;
  }

  void finish(Request& r, FinishReason reason, RequestEvent ev, const std::string& error = "") {
    sched_->remove(&r);
    if (drafter_) drafter_->release(r.id);
    ev.id = r.id;
    if (reason != FinishReason::Error && reason != FinishReason::Cancelled) ev.text += r.stream.flush();
    ev.finished = true;
    ev.reason = reason;
    ev.error = error;
    ev.prompt_tokens = r.n_prompt;
    ev.cached_tokens = r.cached_tokens;
    ev.completion_tokens = r.completion_tokens;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.requests_finished;
      stats_.prompt_tokens += r.n_prompt;
    }
    RequestCallback cb = std::move(r.callback);
    requests_.erase(r.id);  // r is gone from here on
    publish_stats();        // its blocks are already back: the finished event sees that in stats()
    emit(cb, ev);
  }

  // A throwing callback must not take the engine thread down.
  static void emit(const RequestCallback& cb, const RequestEvent& ev) {
    if (!cb) return;
    try {
      cb(ev);
    } catch (...) {
    }
  }

  // Samples the next token of r from its logits row and reports it. Returns
  // the token, or -1 when r finished (and is gone).
  int32_t advance(Request& r, const float* logits, Clock::time_point now) {
    const Tokenizer& tok = model_.tokenizer();
    const int n_vocab = model_.config().n_vocab;
    RequestEvent ev;
    ev.id = r.id;
    if (r.params.max_tokens == 0) {
      finish(r, FinishReason::Length, std::move(ev));
      return -1;
    }
    std::shared_ptr<const grammar::TokenMask> mask;
    if (r.grammar) mask = r.grammar->mask();
    const int32_t next = r.sampler.sample(logits, mask ? mask->data() : nullptr);
    if (next < 0) {
      finish(r, FinishReason::Error, std::move(ev),
             r.grammar ? "the grammar allows no token of this vocabulary here (it needs text the tokenizer cannot "
                         "produce, or logit_bias bans the tokens it allows)"
                       : "logit_bias bans every token of the vocabulary");
      return -1;
    }
    if (r.grammar) r.grammar->accept(next);
    r.sampler.accept(next);
    ++r.completion_tokens;
    ev.tokens.push_back(next);
    if (r.params.top_logprobs >= 0) fill_logprobs(logits, n_vocab, next, r.params.top_logprobs, ev);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.generated_tokens;
      if (r.completion_tokens == 1) stats_.ttft.add(seconds_between(r.submitted, now));
      else stats_.inter_token.add(seconds_between(r.last_token, now));
    }
    r.last_token = now;
    if (tok.is_eog(next) && !r.params.ignore_eos) {
      finish(r, FinishReason::Stop, std::move(ev));
      return -1;
    }
    ev.text = r.stream.push(tok.token_to_piece(next));
    if (r.stream.stopped()) {
      finish(r, FinishReason::Stop, std::move(ev));
      return -1;
    }
    r.tokens.push_back(next);
    if (r.grammar && r.grammar->complete()) {  // nothing more can follow: no need to wait for EOS
      finish(r, FinishReason::Stop, std::move(ev));
      return -1;
    }
    if (r.completion_tokens >= r.params.max_tokens || (int)r.tokens.size() >= opt_.n_ctx) {
      finish(r, FinishReason::Length, std::move(ev));
      return -1;
    }
    emit(r.callback, ev);
    return next;
  }

  void step() {
    for (SchedRequest* f : sched_->take_failed()) {
      Request& r = static_cast<Request&>(*f);
      finish(r, FinishReason::Error, RequestEvent{}, r.error);
    }
    std::vector<StepChunk> plan = sched_->plan();
    idle_ = plan.empty();
    for (SchedRequest* f : sched_->take_failed()) {
      Request& r = static_cast<Request&>(*f);
      finish(r, FinishReason::Error, RequestEvent{}, r.error);
    }
    // A forward pass whose expert read outlasts read_stall_ms gives up
    // (ReadStalled): the requests routed to that expert wait aside until the
    // read lands and the pass runs again without them. Outputs do not depend
    // on the batch, so they are unchanged. Not for recurrent (hybrid) models,
    // whose state a pass given up half way would have advanced.
    bool may_defer = opt_.read_stall_ms > 0 && !kv_->recurrent() && model_.weights().streaming();
    if (spec_on_) add_drafts(plan);
    while (!plan.empty()) {
      set_aside_parked(plan);
      if (plan.empty()) {  // everything runnable waits for a read: poll (20 ms) like an idle engine
        idle_ = true;
        break;
      }
      batch_.clear();
      for (const StepChunk& c : plan) {
        const int n_own = c.n - c.n_draft;  // the request's tokens; then its draft
        Request& r = static_cast<Request&>(*c.req);
        const std::vector<int32_t>& draft = r.draft;
        if (RecurrentState* rs = kv_->recurrent(); rs && (c.n_draft > 0 || r.stepwise_until > c.begin)) {
          batch_.stepwise_seqs.push_back(r.slot);  // one-token steps, the numbers of plain decoding
          if (c.n_draft > 0) r.state_backup_tokens = rs->save(r.slot, r.state_backup);
        }
        for (int i = 0; i < c.n; ++i)
          batch_.add(i < n_own ? c.req->tokens[c.begin + i] : draft[i - n_own], c.begin + i, c.req->slot,
                     c.logits && (i + 1 == c.n || (c.n_draft > 0 && i + 1 >= n_own)));
      }
      const int n_vocab = model_.config().n_vocab;
      logits_.resize((size_t)std::max(1, batch_.n_outputs()) * n_vocab);
      std::string error;
      model_.weights().set_read_stall_ms(may_defer ? opt_.read_stall_ms : 0);
      const Clock::time_point t_fwd = Clock::now();
      try {
        model_.forward(batch_, *kv_, logits_.data());
        costs_.record(batch_.size(), seconds_between(t_fwd, Clock::now()));
      } catch (const ReadStalled& stalled) {
        if (!park(plan, stalled)) may_defer = false;  // no tokens named: wait for the read
        continue;  // the others go on now (an emptied plan: the engine polls for the read and new requests)
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (!error.empty()) {  // fail the step's requests, keep serving the others
        std::vector<RequestId> ids;
        for (const StepChunk& c : plan) ids.push_back(c.req->id);
        for (RequestId id : ids) {
          auto it = requests_.find(id);
          if (it != requests_.end()) finish(*it->second, FinishReason::Error, RequestEvent{}, error);
        }
      } else {
        {
          std::lock_guard<std::mutex> lock(stats_mu_);
          stats_.computed_tokens += (uint64_t)batch_.size();
        }
        sched_->commit(plan);
        const Clock::time_point now = Clock::now();
        int row = 0;
        for (const StepChunk& c : plan) {
          if (!c.logits) continue;
          if (c.n_draft == 0) {
            advance(static_cast<Request&>(*c.req), logits_.data() + (size_t)row++ * n_vocab, now);
            continue;
          }
          verify(static_cast<Request&>(*c.req), c.n_draft, logits_.data() + (size_t)row * n_vocab, now);
          row += c.n_draft + 1;
        }
      }
      break;
    }
    publish_stats();
  }

  // Speculative decoding: offers each decode chunk's request a draft (n-gram
  // lookup, or the draft model where it is likelier to be accepted) and lets
  // the governor choose how many of its tokens to verify (extending the chunk
  // by that many rows); n-gram drafts not verified are scored for free. The
  // draft model then drafts the tokens chosen, for all its sequences at once.
  void add_drafts(std::vector<StepChunk>& plan) {
    struct Offer {
      StepChunk* chunk;
      std::vector<int32_t> draft;  // n-gram drafts; the draft model's come after the choice
      DraftSource src;
    };
    std::vector<Offer> offers;
    std::vector<SpecCandidate> cands;
    int rows = 0, tokens = 0;
    for (StepChunk& c : plan) {
      rows += c.n;
      tokens += c.logits ? 1 : 0;
      Request& r = static_cast<Request&>(*c.req);
      r.draft.clear();
      if (!c.logits || c.n != 1 || c.begin + 1 != (int)r.tokens.size() || !r.params.speculate) continue;
      r.spec.observe(r.tokens);
      // No token past max_tokens or the context is drafted (the last one sampled needs no draft row).
      const int k = std::min({opt_.spec.max_draft, r.params.max_tokens - r.completion_tokens - 1,
                              opt_.n_ctx - (int)r.tokens.size() - 1, sched_->draft_limit(&r)});
      if (k <= 0) continue;
      std::vector<int32_t> d = r.spec.propose(r.tokens, k);
      if (drafter_ && r.spec.prefers_model(!d.empty())) {
        if (!d.empty()) r.spec.shadow(std::move(d), (int)r.tokens.size());  // still scored, for free
        offers.push_back({&c, {}, DraftSource::Model});
        cands.push_back({k, r.spec.evidence(DraftSource::Model), true});
        continue;
      }
      if (d.empty()) continue;
      cands.push_back({(int)d.size(), r.spec.evidence(DraftSource::Ngram), false});
      offers.push_back({&c, std::move(d), DraftSource::Ngram});
    }
    const std::vector<int> k = choose_drafts(opt_.spec.mode, costs_, rows, tokens, cands,
                                             opt_.max_batch_tokens - rows, drafter_ ? &drafter_->costs() : nullptr);
    double draft_seconds = 0;
    if (drafter_) {
      std::vector<DraftJob> jobs;
      std::vector<size_t> of;
      for (size_t i = 0; i < offers.size(); ++i)
        if (offers[i].src == DraftSource::Model && k[i] > 0) {
          jobs.push_back({offers[i].chunk->req->id, &offers[i].chunk->req->tokens, k[i], {}});
          of.push_back(i);
        }
      if (!jobs.empty()) {
        const Clock::time_point t0 = Clock::now();
        drafter_->propose(jobs);
        draft_seconds = seconds_between(t0, Clock::now());
        for (size_t j = 0; j < jobs.size(); ++j) offers[of[j]].draft = std::move(jobs[j].draft);
      }
    }
    int drafting = 0, extra = 0;
    double acc = 0;
    uint64_t declined = 0;
    for (size_t i = 0; i < offers.size(); ++i) {
      Request& r = static_cast<Request&>(*offers[i].chunk->req);
      std::vector<int32_t>& d = offers[i].draft;
      acc += cands[i].acceptance;
      const int n = std::min<int>(k[i], (int)d.size());
      if (n > 0 && sched_->extend_with_draft(*offers[i].chunk, n)) {
        r.draft.assign(d.begin(), d.begin() + n);
        r.draft_src = offers[i].src;
        ++drafting;
        extra += n;
      } else {
        if (offers[i].src == DraftSource::Ngram) r.spec.shadow(std::move(d), (int)r.tokens.size());
        ++declined;
      }
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    SpecStats& st = stats_.spec;
    st.declined += declined;
    st.drafting = drafting;
    st.draft_seconds += draft_seconds;
    if (!offers.empty()) st.acceptance = acc / offers.size();
    if (extra > 0 && costs_.estimate(rows) > 0) st.verify_cost = costs_.estimate(rows + extra) / costs_.estimate(rows);
  }

  // Samples r's rows after a drafted decode chunk in order, accepting drafted
  // tokens while they equal what was sampled (speculative.h: this is the
  // accept/reject rule for a one-sequence draft), then commits the accepted
  // positions; the rest of the chunk's K/V is overwritten later.
  void verify(Request& r, int n_draft, const float* logits, Clock::time_point now) {
    const int n_vocab = model_.config().n_vocab;
    const std::vector<int32_t> draft = std::move(r.draft);
    const DraftSource src = r.draft_src;  // r may be gone after advance()
    r.draft.clear();
    RecurrentState* rs = kv_->recurrent();
    const int begin = r.n_computed - 1;  // the pending token's position (commit() counted it)
    int accepted = 0;
    bool alive = true;
    for (int i = 0; i <= n_draft; ++i) {
      const int32_t t = advance(r, logits + (size_t)i * n_vocab, now);  // -1: r finished and is gone
      if (t < 0) {
        alive = false;
        break;
      }
      if (i == n_draft || t != draft[i]) break;
      ++accepted;
      if (!rs) sched_->commit_accepted(&r, 1);
    }
    if (alive) {
      r.spec.verified(n_draft, accepted, src);
      if (rs && accepted == n_draft) {
        sched_->commit_accepted(&r, accepted);  // the state folded in exactly the accepted tokens
      } else if (rs) {
        // The state folded in rejected tokens too: back to before the pass; the pending and accepted tokens
        // are computed again (one token at a time, as here) with the next step.
        rs->restore(r.slot, r.state_backup, r.state_backup_tokens);
        sched_->rollback(&r, begin);
        r.stepwise_until = (int)r.tokens.size();
      }
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.spec.drafted += n_draft;
    stats_.spec.accepted += accepted;
    if (src == DraftSource::Model) {
      stats_.spec.model_drafted += n_draft;
      stats_.spec.model_accepted += accepted;
    }
    ++stats_.spec.verify_steps;
  }

  // Drops from the plan the requests waiting aside for a stalled read; a
  // request whose read has landed (or failed) rejoins.
  void set_aside_parked(std::vector<StepChunk>& plan) {
    if (parked_.empty()) return;
    WeightStore& ws = model_.weights();
    for (auto it = parked_.begin(); it != parked_.end();)
      it = (requests_.count(it->first) && ws.read_pending(it->second)) ? std::next(it) : parked_.erase(it);
    plan.erase(std::remove_if(plan.begin(), plan.end(), [&](const StepChunk& c) { return parked_.count(c.req->id) > 0; }),
               plan.end());
  }

  // The requests owning the stalled tokens wait aside (all of the pass's, if
  // need be: the engine then serves new requests meanwhile); false if none is named.
  bool park(const std::vector<StepChunk>& plan, const ReadStalled& stalled) {
    std::vector<RequestId> owner;  // batch row -> request
    for (const StepChunk& c : plan) owner.insert(owner.end(), c.n, c.req->id);
    std::set<RequestId> stalled_ids;
    for (int t : stalled.tokens)
      if (t >= 0 && t < (int)owner.size()) stalled_ids.insert(owner[t]);
    if (stalled_ids.empty()) return false;
    for (RequestId id : stalled_ids) parked_[id] = stalled.unit;
    return true;
  }

  void publish_stats() {
    int waiting = (int)sched_->waiting().size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      n_waiting_ = waiting;
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.running = (int)sched_->running().size();
    stats_.waiting = waiting;
    stats_.kv_blocks_used = kv_->n_held();
    stats_.kv_blocks_cached = kv_->n_cached();
    stats_.preemptions = sched_->preemptions();
    stats_.prefix_hit_tokens = sched_->prefix_hit_tokens();
    if (disk_) {
      stats_.kv_disk_hit_tokens = sched_->disk_hit_tokens();
      stats_.kv_disk_stats = disk_->stats();
    }
    if (const RecurrentState* rs = kv_->recurrent()) {
      stats_.recurrent_state_bytes = rs->bytes_allocated();
      stats_.recurrent_sequences = rs->n_active();
    }
    if (const StateSnapshots* ss = sched_->snapshots()) {
      const StateSnapshotStats st = ss->stats();
      stats_.state_snapshots = st.count;
      stats_.state_snapshot_bytes = st.bytes;
      stats_.state_snapshot_hits = st.hits;
      stats_.state_snapshot_misses = st.misses;
    }
  }

  void loop() {
    // Each row's logits must not depend on the rows batched with it (greedy
    // output identical whatever the concurrency, and across preemption).
    set_matmul_batch_invariant(true);
    while (intake()) step();
    // Shutting down: everything left is cancelled.
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!incoming_.empty()) {
        auto r = std::move(incoming_.front());
        incoming_.pop_front();
        sched_->add(r.get());
        const RequestId id = r->id;
        requests_.emplace(id, std::move(r));
      }
    }
    while (!requests_.empty()) finish(*requests_.begin()->second, FinishReason::Cancelled, RequestEvent{});
    publish_stats();
  }

  Model& model_;
  EngineOptions opt_;
  std::unique_ptr<PagedKvCache> kv_;
  std::unique_ptr<KvDiskTier> disk_;  // before sched_: the scheduler uses it until destroyed
  std::unique_ptr<Scheduler> sched_;
  std::thread thread_;

  // Shared with submitters (mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  RequestId next_id_ = 0;
  std::deque<std::unique_ptr<Request>> incoming_;
  std::unordered_set<RequestId> cancels_;
  std::vector<std::pair<uint64_t, std::vector<PrefixHint>>> hints_;  // workflow hints for the scheduler thread
  int n_waiting_ = 0;

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  Batch batch_;
  std::vector<float> logits_;
  bool idle_ = false;
  std::map<RequestId, int> parked_;  // request -> streamed unit whose stalled read it waits for
  bool spec_on_ = false;             // speculative decoding in effect
  StepCosts costs_;                  // forward seconds by batch rows (the governor's cost model)
  std::unique_ptr<DraftModel> drafter_;  // the draft model's state (EngineOptions::draft_model)

  mutable std::mutex stats_mu_;
  EngineStats stats_;
};

}  // namespace

std::unique_ptr<Engine> make_engine(Model& model, const EngineOptions& options) {
  return std::make_unique<EngineImpl>(model, options);
}

}  // namespace spool
