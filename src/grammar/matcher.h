// The grammar matcher: a pushdown automaton over bytes whose stacks are
// persistent and shared. A stack is a node (grammar position, parent node),
// hash-consed, so equal stacks are one id and a push never copies; a matcher
// state is the sorted set of stack tops (each at a byte-set element) plus
// "may end here", interned too. Transitions (state, byte) -> state are
// computed once and cached, so a state reached again (the inside of a JSON
// string, the same field of the next array element) costs a table lookup.
//
// A CompiledGrammar is shared by every sequence that uses the same grammar;
// a sequence holds only its state id. Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace spool::grammar {

constexpr int32_t kDeadState = -1;

class CompiledGrammar {
 public:
  // Throws GrammarError when the grammar fails validate_grammar.
  explicit CompiledGrammar(Grammar g);

  int32_t initial_state() const { return initial_; }
  // The state after one more byte, or kDeadState.
  int32_t advance(int32_t state, uint8_t byte);
  // The state after all of `bytes`, or kDeadState.
  int32_t advance(int32_t state, std::string_view bytes);
  // The text may end here (EOS allowed).
  bool accepting(int32_t state);
  // Accepting and nothing can follow: generation is complete.
  bool complete(int32_t state);
  // Whole-text match.
  bool matches(std::string_view text) { return accepting_or_dead(advance(initial_, text)); }

  size_t n_states();
  size_t n_stack_nodes();
  const Grammar& grammar() const { return g_; }

  // For the token-mask walk: many transitions under one lock.
  std::mutex& mutex() { return mu_; }
  int32_t advance_locked(int32_t state, uint8_t byte);
  bool accepting_locked(int32_t state) const { return state >= 0 && states_[state].accept; }

 private:
  struct Node { uint32_t pos; int32_t parent; };
  struct State {
    std::vector<int32_t> tops;   // nodes at byte-set elements, sorted
    bool accept = false;
    std::vector<int32_t> next;   // 256 entries, kUnknown until computed; empty until first use
  };
  static constexpr int32_t kUnknown = -2;

  bool accepting_or_dead(int32_t s) { return s >= 0 && accepting(s); }
  int32_t node(uint32_t pos, int32_t parent);
  void expand(uint32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& accept);
  int32_t intern(std::vector<int32_t> tops, bool accept);

  Grammar g_;
  std::vector<Element> elems_;                 // every alternative laid out, each followed by End
  std::vector<std::vector<uint32_t>> starts_;  // per rule: its alternatives' first positions
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_ids_;
  std::unordered_set<uint64_t> visited_;       // scratch for one expansion
  int32_t initial_ = kDeadState;
  std::mutex mu_;
};

}  // namespace spool::grammar
