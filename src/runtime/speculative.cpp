// Speculative decoding: n-gram drafts, acceptance estimates, step costs and
// the governor (speculative.h has the rules).
#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace spool {

SpecMode parse_spec_mode(const std::string& s) {
  if (s == "off") return SpecMode::Off;
  if (s == "auto") return SpecMode::Auto;
  if (s == "on") return SpecMode::On;
  throw Error("speculative mode '" + s + "': expected off, auto or on");
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::Off: return "off";
    case SpecMode::Auto: return "auto";
    case SpecMode::On: return "on";
  }
  return "off";
}

namespace {

uint64_t hash_tokens(const int32_t* t, int n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
  for (int i = 0; i < n; ++i) {
    h ^= (uint64_t)(uint32_t)t[i];
    h *= 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

NgramIndex::NgramIndex(int ngram_min, int ngram_max) : n_min_(ngram_min), n_max_(ngram_max) {
  if (n_min_ < 1 || n_max_ < n_min_) throw Error("n-gram sizes: need 1 <= min <= max");
  last_.resize(n_max_ - n_min_ + 1);
}

void NgramIndex::update(const int32_t* tokens, int n) {
  // An n-gram ending at e (tokens[e - len, e)) is indexed once a token follows it: e <= n - 1.
  for (int e = indexed_ + 1; e <= n - 1; ++e)
    for (int len = n_min_; len <= n_max_ && len <= e; ++len) last_[len - n_min_][hash_tokens(tokens + e - len, len)] = e;
  indexed_ = std::max(indexed_, n - 1);
}

int NgramIndex::find(const int32_t* tokens, const int32_t* key, int n) const {
  if (n < n_min_ || n > n_max_) return -1;
  const auto& m = last_[n - n_min_];
  const auto it = m.find(hash_tokens(key, n));
  if (it == m.end()) return -1;
  const int e = it->second;
  if (!std::equal(key, key + n, tokens + e - n)) return -1;  // a hash collision
  return e;
}

DraftContext::DraftContext(std::vector<int32_t> tokens, int ngram_min, int ngram_max)
    : tokens_(std::move(tokens)), index_(ngram_min, ngram_max) {
  index_.update(tokens_.data(), (int)tokens_.size());
}

void AcceptanceEstimate::add(int accepted, bool rejected) {
  // Older evidence fades (weight halves over ~28 drafts), the prior with it.
  constexpr double kKeep = 0.975;
  ++n_;
  acc_ = acc_ * kKeep + accepted;
  rej_ = rej_ * kKeep + (rejected ? 1 : 0);
  rej_ = std::max(rej_, 0.05);  // never certain: keeps rate() < 1
}

SpecSequence::SpecSequence(const SpecOptions& o) : opt_(o), own_(o.ngram_min, o.ngram_max) {}

std::vector<int32_t> SpecSequence::propose(const std::vector<int32_t>& tokens, int k) {
  std::vector<int32_t> draft;
  const int L = (int)tokens.size();
  if (k <= 0 || L < opt_.ngram_min) return draft;
  own_.update(tokens.data(), L);
  for (int n = std::min(opt_.ngram_max, L); n >= opt_.ngram_min; --n) {
    const int32_t* key = tokens.data() + L - n;
    int e = own_.find(tokens.data(), key, n);
    if (e >= 0) {
      // The continuation; past the end of the sequence it goes on into the draft itself (a repetition).
      for (int i = 0; i < k; ++i) {
        const int p = e + i;
        draft.push_back(p < L ? tokens[p] : draft[p - L]);
      }
      return draft;
    }
    for (const auto& c : contexts_) {
      e = c->index().find(c->tokens().data(), key, n);
      if (e < 0) continue;
      const int end = std::min((int)c->tokens().size(), e + k);
      draft.assign(c->tokens().begin() + e, c->tokens().begin() + end);
      return draft;
    }
  }
  return draft;
}

void SpecSequence::shadow(std::vector<int32_t> draft, int start) {
  if (shadow_start_ >= 0 || draft.empty()) return;  // one at a time
  shadow_ = std::move(draft);
  shadow_start_ = start;
}

void SpecSequence::observe(const std::vector<int32_t>& tokens) {
  if (shadow_start_ < 0) return;
  const int have = (int)tokens.size() - shadow_start_;
  int matched = 0;
  while (matched < have && matched < (int)shadow_.size() && tokens[shadow_start_ + matched] == shadow_[matched])
    ++matched;
  const bool rejected = matched < have && matched < (int)shadow_.size();
  if (!rejected && matched < (int)shadow_.size()) return;  // not decided yet
  est_.add(matched, rejected);
  shadow_start_ = -1;
  shadow_.clear();
}

void SpecSequence::verified(int drafted, int accepted, DraftSource src) {
  if (drafted <= 0) return;
  (src == DraftSource::Model ? model_est_ : est_).add(accepted, accepted < drafted);
}

namespace {
constexpr uint64_t kStale = 256;   // steps after which a size is measured again
constexpr double kOptimism = 0.05; // assumed cost of one more row, relative, for sizes not measured
}  // namespace

void StepCosts::record(int rows, double seconds) {
  if (rows <= 0 || !(seconds >= 0)) return;
  ++steps_;
  Entry& e = by_rows_[rows];
  if (e.n == 0 || steps_ - e.step > kStale) e.n = 0;  // fresh: older samples no longer count
  constexpr int kKeep = (int)(sizeof(e.recent) / sizeof(e.recent[0]));
  e.recent[e.n % kKeep] = seconds;
  ++e.n;
  const int m = std::min(e.n, kKeep);
  double sorted[kKeep];
  for (int i = 0; i < m; ++i) {  // insertion sort of at most 7 samples
    int k = i;
    for (; k > 0 && sorted[k - 1] > e.recent[i]; --k) sorted[k] = sorted[k - 1];
    sorted[k] = e.recent[i];
  }
  e.seconds = m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
  e.step = steps_;
}

bool StepCosts::measured(int rows) const {
  const auto it = by_rows_.find(rows);
  return it != by_rows_.end() && steps_ - it->second.step <= kStale;
}

double StepCosts::estimate(int rows) const {
  if (measured(rows)) return by_rows_.at(rows).seconds;
  const Entry* lo = nullptr;
  const Entry* hi = nullptr;
  int lo_rows = 0, hi_rows = 0;
  for (const auto& [r, e] : by_rows_) {
    if (steps_ - e.step > kStale) continue;
    if (r < rows) lo = &e, lo_rows = r;
    else if (!hi) hi = &e, hi_rows = r;
  }
  double est = 0;
  if (lo) est = lo->seconds * (1 + kOptimism * (rows - lo_rows));
  if (lo && hi) est = lo->seconds + (hi->seconds - lo->seconds) * (rows - lo_rows) / (double)(hi_rows - lo_rows);
  if (!lo && hi) est = hi->seconds;
  return est;
}

std::vector<int> choose_drafts(SpecMode mode, const StepCosts& costs, int base_rows, int base_tokens,
                               const std::vector<SpecCandidate>& candidates, int room, const StepCosts* draft_costs) {
  std::vector<int> k(candidates.size(), 0);
  if (mode == SpecMode::Off || room <= 0) return k;
  if (mode == SpecMode::On) {
    for (size_t i = 0; i < candidates.size() && room > 0; ++i) {
      k[i] = std::min(candidates[i].available, room);
      room -= k[i];
    }
    return k;
  }
  // The step's own size not measured (lately): decode plainly, which measures it. An estimate of it from
  // larger passes would make every draft look free, and a step that always drafts never measures it.
  if (!costs.measured(base_rows)) return k;
  double t = costs.estimate(base_rows);
  double tokens = std::max(1, base_tokens);
  int rows = base_rows;
  // The draft model's passes: rows of pass j (the j+1-th draft token of each sequence) and their time.
  std::vector<int> pass_rows;
  double t_draft = 0;
  auto pass_cost = [&](int n) { return n > 0 && draft_costs ? draft_costs->estimate(n) : 0.0; };
  std::vector<double> next(candidates.size());  // P(the next draft token of i is accepted and yields a token)
  for (size_t i = 0; i < candidates.size(); ++i) next[i] = candidates[i].acceptance;
  while (room > 0) {
    int best = -1;
    for (size_t i = 0; i < candidates.size(); ++i)
      if (k[i] < candidates[i].available && (best < 0 || next[i] > next[best])) best = (int)i;
    if (best < 0) break;
    const double t2 = costs.estimate(rows + 1);
    double t_draft2 = t_draft;
    const int j = k[best];
    if (candidates[best].model) {
      if ((int)pass_rows.size() <= j) pass_rows.resize(j + 1, 0);
      const int add = j == 0 ? 2 : 1;  // the first pass also computes the tokens since the last draft
      t_draft2 += pass_cost(pass_rows[j] + add) - pass_cost(pass_rows[j]);
    }
    // Expected tokens per second must rise (t2 > 0: an estimate exists for every size above a measured one).
    if (!(t2 > 0) || (tokens + next[best]) / (t2 + t_draft2) <= tokens / (t + t_draft)) break;
    if (candidates[best].model) pass_rows[j] += j == 0 ? 2 : 1;
    tokens += next[best];
    t = t2;
    t_draft = t_draft2;
    ++rows;
    --room;
    ++k[best];
    next[best] *= candidates[best].acceptance;
  }
  return k;
}

}  // namespace spool
