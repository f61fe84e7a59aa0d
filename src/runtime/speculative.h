// Speculative decoding's parts, shared by the serving engine and `spool run`:
// n-gram drafts, acceptance tracking, the measured cost of a step by its
// number of rows, and the governor that decides how many drafted tokens a
// step verifies.
//
// Drafts: the last n tokens of a sequence (n from ngram_max down to
// ngram_min) are looked up in the sequence's own earlier tokens, then in the
// shared contexts given to it (an agent run's other prompts and outputs); the
// tokens that followed the latest match are the draft. A match inside the
// current repetition continues into the draft itself, so a loop of period p
// drafts the full K tokens.
//
// Verification (the caller's): the target model runs the sequence's pending
// token plus the draft in one pass with logits on every row; row i is sampled
// with the request's own sampler and accepted while it equals draft token i.
// A draft here is one token sequence (a point mass), so sampling the target
// and comparing is exactly the standard accept/reject rule (accept d with
// probability min(1, p(d)/q(d)) = p(d); on rejection sample from p without
// d): outputs follow the target distribution, and with a seed they are the
// very tokens decoding without drafts gives (rows are batch-invariant and the
// sampler draws once per row in the same order).
//
// Governor (SpecMode::Auto): each sequence keeps an acceptance estimate (a
// geometric rate: P(next draft token accepted)), updated from verified drafts
// and, for free, from drafts that were not verified (compared with the tokens
// that came). The step cost is measured per number of rows in the pass. Draft
// tokens are added one at a time, to the sequence whose next one is most
// likely accepted, while expected tokens per second rise. Step sizes not yet
// measured (or not for a while) are assumed cheap, so they are tried once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace spool {

enum class SpecMode { Off, Auto, On };
SpecMode parse_spec_mode(const std::string& s);  // "off" | "auto" | "on"; throws spool::Error otherwise
const char* spec_mode_name(SpecMode m);

struct SpecOptions {
  SpecMode mode = SpecMode::Auto;
  int max_draft = 8;  // --spec-max: drafted tokens per sequence and step at most
  int ngram_min = 2, ngram_max = 4;
};

// The latest occurrence of each n-gram (ngram_min..ngram_max) of an
// append-only token sequence that has at least one token after it.
class NgramIndex {
 public:
  NgramIndex(int ngram_min, int ngram_max);
  // Indexes the n-grams of tokens[0, n) not indexed yet; `tokens` extends the
  // sequence given before.
  void update(const int32_t* tokens, int n);
  // The position after the latest indexed occurrence of key[0, n), checked
  // against `tokens` (the indexed sequence); -1 if none.
  int find(const int32_t* tokens, const int32_t* key, int n) const;
  int ngram_min() const { return n_min_; }
  int ngram_max() const { return n_max_; }

 private:
  int n_min_, n_max_;
  int indexed_ = 0;  // n-grams ending at positions <= indexed_ are in the maps
  std::vector<std::unordered_map<uint64_t, int>> last_;  // per n - n_min: hash -> end position
};

// Immutable tokens with their index: a context several sequences draft from.
class DraftContext {
 public:
  DraftContext(std::vector<int32_t> tokens, int ngram_min = 2, int ngram_max = 4);
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const NgramIndex& index() const { return index_; }

 private:
  std::vector<int32_t> tokens_;
  NgramIndex index_;
};

// P(a draft token is accepted | the ones before it were), with a prior and
// a slow decay so it follows a request whose text changes character.
class AcceptanceEstimate {
 public:
  // The prior: `acc` accepted against `rej` rejected (1/3 by default).
  explicit AcceptanceEstimate(double acc = 0.5, double rej = 1.0) : acc_(acc), rej_(rej) {}
  // `accepted` draft tokens matched; `rejected`: one did not (false when the draft ran out first).
  void add(int accepted, bool rejected);
  double rate() const { return acc_ / (acc_ + rej_); }
  bool scored() const { return n_ > 0; }  // any draft scored yet (until then the governor does not draft)

 private:
  double acc_, rej_;
  int n_ = 0;
};

// Where a draft came from: n-gram lookup (free) or a draft model (a pass of
// the draft model per drafted token; runtime/draft_model.h).
enum class DraftSource { Ngram, Model };

// One sequence's drafting state.
class SpecSequence {
 public:
  explicit SpecSequence(const SpecOptions& o = {});
  void set_contexts(std::vector<std::shared_ptr<const DraftContext>> contexts) { contexts_ = std::move(contexts); }
  // A draft of at most k tokens to follow `tokens` (the sequence so far).
  std::vector<int32_t> propose(const std::vector<int32_t>& tokens, int k);
  // A proposed draft that was not verified: scored for free as tokens come (observe()).
  void shadow(std::vector<int32_t> draft, int start);
  // Scores the pending shadow draft against the sequence's tokens now.
  void observe(const std::vector<int32_t>& tokens);
  // A verified draft of `drafted` tokens of which the first `accepted` matched.
  void verified(int drafted, int accepted, DraftSource src = DraftSource::Ngram);
  double acceptance() const { return est_.rate(); }
  double model_acceptance() const { return model_est_.rate(); }
  // What the governor goes by: for n-gram drafts the estimate once a draft of
  // this sequence was scored (a shadow draft costs nothing), 0 before; for a
  // draft model its estimate, the prior until its drafts were verified.
  double evidence(DraftSource src = DraftSource::Ngram) const {
    if (src == DraftSource::Model) return model_est_.rate();
    return est_.scored() ? est_.rate() : 0.0;
  }
  // With a draft model at hand: whether it drafts this step rather than the
  // n-gram lookup (which found nothing, or is the less likely to be accepted).
  bool prefers_model(bool have_ngram_draft) const {
    return !have_ngram_draft || evidence(DraftSource::Ngram) < evidence(DraftSource::Model);
  }

 private:
  SpecOptions opt_;
  NgramIndex own_;
  std::vector<std::shared_ptr<const DraftContext>> contexts_;
  AcceptanceEstimate est_;        // n-gram drafts
  // The draft model's: a prior of 0.6, what a draft model chosen for its
  // target commonly reaches, so that it is tried where verifying is cheap
  // (unlike n-gram drafts it cannot be scored for free).
  AcceptanceEstimate model_est_{1.5, 1.0};
  std::vector<int32_t> shadow_;
  int shadow_start_ = -1;
};

// Measured seconds of a forward pass by its number of rows (the median of the
// recent passes of that size).
class StepCosts {
 public:
  void record(int rows, double seconds);
  // Measured, or, when not measured recently: the interpolation between the
  // measured neighbours (a prefill pass gives a large one), or above the
  // largest measured size an optimistic 5 % a row more; 0 when nothing is known.
  double estimate(int rows) const;
  bool measured(int rows) const;

 private:
  struct Entry {
    double seconds = 0;       // the median of the recent samples
    double recent[7] = {};    // the last samples (a ring): a median ignores a pass that waited for a
    int n = 0;                // woken thread or a page fault, which a mean would keep for many steps
    uint64_t step = 0;        // when last recorded
  };
  std::map<int, Entry> by_rows_;
  uint64_t steps_ = 0;
};

// A sequence that could verify a draft this step.
struct SpecCandidate {
  int available = 0;       // drafted tokens on offer
  double acceptance = 0;   // its acceptance estimate
  bool model = false;      // drafted by the draft model (each token costs a draft pass) rather than looked up
};

// How many draft tokens each candidate verifies this step. base_rows: the
// pass's rows without drafts; base_tokens: tokens the pass yields without
// drafts (one per sequence sampled); room: extra rows the step may take.
// draft_costs: the draft model's passes by rows; a model candidate's j-th
// token adds a row to the draft model's j-th pass (the first pass also
// brings the sequence up to date: counted as two rows), which the step's time
// includes. The model drafts after this choice, only the tokens chosen.
std::vector<int> choose_drafts(SpecMode mode, const StepCosts& costs, int base_rows, int base_tokens,
                               const std::vector<SpecCandidate>& candidates, int room,
                               const StepCosts* draft_costs = nullptr);

// Counters for /metrics, /v1/stats and --stats-json.
struct SpecStats {
  SpecMode mode = SpecMode::Off;
  int max_draft = 0;
  bool draft_model = false;    // a draft model (-md) drafts besides n-gram lookup
  uint64_t model_drafted = 0;  // of the verified draft tokens, those the draft model made
  uint64_t model_accepted = 0; // of those, accepted
  double draft_seconds = 0;    // time in the draft model's passes
  uint64_t drafted = 0;        // draft tokens verified
  uint64_t accepted = 0;       // of those, accepted
  uint64_t verify_steps = 0;   // sequence-steps that verified a draft
  uint64_t declined = 0;       // sequence-steps with a draft on offer that the governor did not verify
  int drafting = 0;            // sequences that verified a draft in the last step
  double acceptance = 0;       // mean acceptance estimate of the last step's candidates
  // The last drafted step's cost over the same step without its drafts (the
  // governor's measured costs by rows); spool run: 1 + max_draft rows over 1. 0: none yet.
  double verify_cost = 0;
};

}  // namespace spool
