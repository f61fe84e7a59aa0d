// The draft model of speculative decoding (draft_model.h has the rules).
#include "runtime/draft_model.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace spool {

void check_draft_model(const Model& target, const Model& draft) {
  const std::string name = "the draft model (" + draft.config().name + ", " + draft.config().arch + ")";
  if (!draft.kv_shape().recurrent.empty())
    throw Error(name + " has linear-attention layers with a recurrent state, which cannot drop rejected draft "
                "positions; give an attention-only draft model");
  const Tokenizer& a = target.tokenizer();
  const Tokenizer& b = draft.tokenizer();
  // Vocabularies padded to a multiple (of 64, 128, ...) differ only in unused ids at the end.
  constexpr int kPadding = 128;
  if (std::abs(a.n_vocab() - b.n_vocab()) > kPadding)
    throw Error(name + " has a vocabulary of " + std::to_string(b.n_vocab()) + " tokens, the model " +
                std::to_string(a.n_vocab()) + ": a draft model must share the model's tokenizer");
  const int n = std::min(a.n_vocab(), b.n_vocab());
  int differ = 0, first = -1;
  for (int i = 0; i < n; ++i)
    if (a.token_text(i) != b.token_text(i)) {
      if (first < 0) first = i;
      ++differ;
    }
  if (differ > 0)
    throw Error(name + " has another vocabulary: " + std::to_string(differ) + " of " + std::to_string(n) +
                " token texts differ (the first: id " + std::to_string(first) + ", '" + b.token_text(first) +
                "' against the model's '" + a.token_text(first) + "')");
  if (a.bos() != b.bos() || a.eos() != b.eos())
    throw Error(name + " has other special tokens (BOS " + std::to_string(b.bos()) + ", EOS " +
                std::to_string(b.eos()) + "; the model: BOS " + std::to_string(a.bos()) + ", EOS " +
                std::to_string(a.eos()) + ")");
}

DraftModel::DraftModel(Model& draft, int n_vocab, int n_ctx, int max_seqs)
    : model_(draft), n_vocab_(std::min(n_vocab, draft.config().n_vocab)), n_ctx_(n_ctx), max_seqs_(max_seqs) {
  if (n_ctx <= 0 || max_seqs <= 0) throw Error("draft model: n_ctx and max_seqs must be positive");
  if (!draft.kv_shape().recurrent.empty())
    throw Error("draft model: a model with a recurrent state cannot draft (its state cannot drop positions)");
  kv_ = make_simple_kv_cache(draft.kv_shape(), n_ctx, max_seqs);
  for (int s = max_seqs - 1; s >= 0; --s) free_slots_.push_back(s);
}

DraftModel::Seq& DraftModel::seq_for(uint64_t key) {
  auto it = seqs_.find(key);
  if (it != seqs_.end()) return it->second;
  if (free_slots_.empty()) {  // more sequences than slots: the least recently drafted one starts over later
    auto victim = std::min_element(seqs_.begin(), seqs_.end(),
                                   [](const auto& x, const auto& y) { return x.second.used < y.second.used; });
    release(victim->first);
  }
  Seq s;
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  return seqs_.emplace(key, std::move(s)).first->second;
}

void DraftModel::release(uint64_t key) {
  auto it = seqs_.find(key);
  if (it == seqs_.end()) return;
  kv_->clear(it->second.slot);
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
}

void DraftModel::run(const Batch& b) {
  logits_.resize((size_t)std::max(1, b.n_outputs()) * model_.config().n_vocab);
  const auto t0 = std::chrono::steady_clock::now();
  model_.forward(b, *kv_, logits_.data());
  costs_.record(b.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ++passes_;
  rows_ += (uint64_t)b.size();
}

int32_t DraftModel::argmax(const float* row) const {
  int32_t best = 0;
  for (int32_t i = 1; i < n_vocab_; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

void DraftModel::propose(std::vector<DraftJob>& jobs) {
  ++step_;
  const Tokenizer& tok = model_.tokenizer();
  const int n_vocab_rows = model_.config().n_vocab;
  const int max_rows = std::max(1, model_.n_batch() > 0 ? model_.n_batch() : 512);
  struct Live {
    DraftJob* job;
    Seq* seq;
    int cursor;  // next position to compute in the catch-up
    int len;     // tokens in the sequence
  };
  std::vector<Live> live;
  for (DraftJob& j : jobs) {
    j.draft.clear();
    const std::vector<int32_t>& t = *j.tokens;
    const int len = (int)t.size();
    // Rows for d_0 .. d_{k-2} sit at positions len .. len + k - 2.
    j.k = std::min(j.k, n_ctx_ - len + 1);
    if (j.k <= 0 || len == 0) continue;
    Seq& s = seq_for(j.key);
    s.used = step_;
    // What stays valid: the common prefix of what was computed and the sequence, less the last token
    // (its row gives the logits of the first draft token).
    size_t valid = 0;
    const size_t cap = std::min(s.computed.size(), t.size() - 1);
    while (valid < cap && s.computed[valid] == t[valid]) ++valid;
    s.computed.resize(valid);
    kv_->reserve(s.slot, len);
    live.push_back({&j, &s, (int)valid, len});
  }
  if (live.empty()) return;

  // Catch-up: every sequence's new tokens, in passes of at most max_rows rows; the last row of each gives d_0.
  for (size_t next = 0; next < live.size();) {
    batch_.clear();
    std::vector<size_t> finishing;  // live entries whose last row is in this pass, in output order
    for (size_t i = next; i < live.size() && batch_.size() < max_rows; ++i) {
      Live& l = live[i];
      const std::vector<int32_t>& t = *l.job->tokens;
      while (l.cursor < l.len && batch_.size() < max_rows) {
        const bool last = l.cursor + 1 == l.len;
        batch_.add(t[l.cursor], l.cursor, l.seq->slot, last);
        if (last) finishing.push_back(i);
        ++l.cursor;
      }
      if (l.cursor == l.len) next = i + 1;
    }
    run(batch_);
    for (size_t o = 0; o < finishing.size(); ++o) {
      Live& l = live[finishing[o]];
      const std::vector<int32_t>& t = *l.job->tokens;
      l.seq->computed.assign(t.begin(), t.end());
      const int32_t d = argmax(logits_.data() + o * n_vocab_rows);
      l.job->draft.push_back(d);
    }
  }

  // One pass per further draft token: the rows of the sequences still drafting.
  auto drafting = [&](const Live& l) {
    const std::vector<int32_t>& d = l.job->draft;
    return !d.empty() && (int)d.size() < l.job->k && !tok.is_eog(d.back());
  };
  for (;;) {
    batch_.clear();
    std::vector<Live*> rows;
    for (Live& l : live) {
      if (!drafting(l)) continue;
      const int pos = l.len + (int)l.job->draft.size() - 1;
      kv_->reserve(l.seq->slot, pos + 1);
      batch_.add(l.job->draft.back(), pos, l.seq->slot, true);
      rows.push_back(&l);
    }
    if (rows.empty()) break;
    run(batch_);
    for (size_t o = 0; o < rows.size(); ++o) {
      Live& l = *rows[o];
      l.seq->computed.push_back(l.job->draft.back());
      l.job->draft.push_back(argmax(logits_.data() + o * n_vocab_rows));
    }
  }
  for (Live& l : live)  // never more than asked (k may have been cut by the context)
    if ((int)l.job->draft.size() > l.job->k) l.job->draft.resize(l.job->k);
}

}  // namespace spool
