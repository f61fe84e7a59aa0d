// Token masks: which vocabulary tokens may come next in a grammar state.
//
// Per vocabulary (VocabIndex, built once per model): every token's bytes,
// and the tokens sorted by those bytes with the common-prefix length to the
// previous one, so one walk over the sorted list is a walk over the token
// trie: a shared prefix is matched once, and a prefix the grammar rejects
// rejects every token under it in O(1) each.
//
// Per grammar and vocabulary (TokenMasker): masks cached by matcher state.
// Since states are interned, a state that recurs (inside a string, the same
// field of the next array item, every request with the same schema) costs a
// hash lookup. End-of-generation tokens are allowed exactly in accepting
// states; control tokens with no text never are.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace spool {
class Tokenizer;
}

namespace spool::grammar {

struct VocabIndex {
  int32_t n_vocab = 0;
  std::vector<std::string> bytes;  // per token id ("" for control tokens)
  std::vector<int32_t> order;      // ids with text, sorted by bytes
  std::vector<uint32_t> lcp;       // per order entry: common prefix with the previous entry
  std::vector<int32_t> eog;        // end-of-generation ids
  size_t max_len = 0;

  static std::shared_ptr<const VocabIndex> build(const Tokenizer& tok);
  static std::shared_ptr<const VocabIndex> build(std::vector<std::string> bytes, std::vector<int32_t> eog);
};

using TokenMask = std::vector<uint32_t>;  // bit i: token i allowed
inline bool mask_has(const TokenMask& m, int32_t id) { return (m[(size_t)id >> 5] >> (id & 31)) & 1; }

class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<CompiledGrammar> grammar, std::shared_ptr<const VocabIndex> vocab);

  std::shared_ptr<const TokenMask> mask(int32_t state);
  // The state after a token (kDeadState if the grammar does not allow it).
  int32_t advance(int32_t state, int32_t token);
  CompiledGrammar& grammar() { return *grammar_; }
  const VocabIndex& vocab() const { return *vocab_; }
  uint64_t mask_hits() const { return hits_; }
  uint64_t mask_misses() const { return misses_; }

 private:
  TokenMask compute(int32_t state);

  std::shared_ptr<CompiledGrammar> grammar_;
  std::shared_ptr<const VocabIndex> vocab_;
  std::mutex mu_;
  std::unordered_map<int32_t, std::shared_ptr<const TokenMask>> cache_;
  uint64_t hits_ = 0, misses_ = 0;
};

// One sequence's position in its grammar.
class GrammarState {
 public:
  explicit GrammarState(std::shared_ptr<TokenMasker> masker)
      : masker_(std::move(masker)), state_(masker_->grammar().initial_state()) {}
  std::shared_ptr<const TokenMask> mask() { return masker_->mask(state_); }
  // False (and the state unchanged) if the token is not allowed.
  bool accept(int32_t token);
  bool complete() { return masker_->grammar().complete(state_); }
  bool accepting() { return masker_->grammar().accepting(state_); }

 private:
  std::shared_ptr<TokenMasker> masker_;
  int32_t state_;
};

}  // namespace spool::grammar
