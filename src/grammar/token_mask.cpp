// VocabIndex construction and the sorted-prefix mask walk; see token_mask.h.
#include "grammar/token_mask.h"

#include <algorithm>
#include <climits>

#include "text/tokenizer.h"

namespace spool::grammar {

std::shared_ptr<const VocabIndex> VocabIndex::build(std::vector<std::string> bytes, std::vector<int32_t> eog) {
  auto v = std::make_shared<VocabIndex>();
  v->n_vocab = (int32_t)bytes.size();
  v->bytes = std::move(bytes);
  v->eog = std::move(eog);
  for (int32_t id : v->eog) v->bytes[id].clear();  // decided by the accepting state, not by text
  for (int32_t i = 0; i < v->n_vocab; ++i)
    if (!v->bytes[i].empty()) v->order.push_back(i);
  std::sort(v->order.begin(), v->order.end(),
            [&](int32_t a, int32_t b) { return v->bytes[a] < v->bytes[b] || (v->bytes[a] == v->bytes[b] && a < b); });
  v->lcp.resize(v->order.size(), 0);
  for (size_t k = 0; k < v->order.size(); ++k) {
    const std::string& b = v->bytes[v->order[k]];
    v->max_len = std::max(v->max_len, b.size());
    if (k == 0) continue;
    const std::string& a = v->bytes[v->order[k - 1]];
    uint32_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    v->lcp[k] = n;
  }
  return v;
}

std::shared_ptr<const VocabIndex> VocabIndex::build(const Tokenizer& tok) {
  std::vector<std::string> bytes(tok.n_vocab());
  std::vector<int32_t> eog;
  for (int32_t i = 0; i < tok.n_vocab(); ++i) {
    if (tok.is_eog(i)) eog.push_back(i);
    else bytes[i] = tok.token_to_piece(i, false);
  }
  return build(std::move(bytes), std::move(eog));
}

TokenMasker::TokenMasker(std::shared_ptr<CompiledGrammar> grammar, std::shared_ptr<const VocabIndex> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {}

TokenMask TokenMasker::compute(int32_t state) {
  const VocabIndex& v = *vocab_;
  TokenMask m(((size_t)v.n_vocab + 31) / 32, 0);
  if (state < 0) return m;
  std::lock_guard<std::mutex> lock(grammar_->mutex());
  if (grammar_->accepting_locked(state))
    for (int32_t id : v.eog) m[(size_t)id >> 5] |= 1u << (id & 31);
  std::vector<int32_t> st(v.max_len + 1, kDeadState);  // st[d]: the state after d bytes of the current token
  st[0] = state;
  size_t known = 0;       // st[0..known] hold the current token's prefix states
  size_t dead_at = SIZE_MAX;  // a prefix of this length was rejected
  for (size_t k = 0; k < v.order.size(); ++k) {
    const int32_t id = v.order[k];
    const size_t shared = v.lcp[k];
    if (dead_at <= shared) continue;  // extends a rejected prefix
    dead_at = SIZE_MAX;
    known = std::min(known, shared);
    const std::string& b = v.bytes[id];
    size_t d = known;
    for (; d < b.size(); ++d) {
      const int32_t next = grammar_->advance_locked(st[d], (uint8_t)b[d]);
      if (next < 0) break;
      st[d + 1] = next;
    }
    known = d;
    if (d == b.size()) m[(size_t)id >> 5] |= 1u << (id & 31);
    else dead_at = d + 1;
  }
  return m;
}

std::shared_ptr<const TokenMask> TokenMasker::mask(int32_t state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(state); it != cache_.end()) {
      ++hits_;
      return it->second;
    }
  }
  auto m = std::make_shared<const TokenMask>(compute(state));
  std::lock_guard<std::mutex> lock(mu_);
  ++misses_;
  // Bounded: masks are n_vocab/8 bytes each; a grammar with more live states
  // than this recomputes some (held masks stay valid through their shared_ptr).
  if (cache_.size() >= 2048) cache_.clear();
  cache_[state] = m;
  return m;
}

int32_t TokenMasker::advance(int32_t state, int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab) return kDeadState;
  const std::string& b = vocab_->bytes[token];
  if (b.empty()) return kDeadState;
  return grammar_->advance(state, b);
}

bool GrammarState::accept(int32_t token) {
  for (int32_t id : masker_->vocab().eog)
    if (id == token) return accepting();
  const int32_t next = masker_->advance(state_, token);
  if (next < 0) return false;
  state_ = next;
  return true;
}

}  // namespace spool::grammar
