// CompiledGrammar: flattening, stack-node and state interning, and the
// closure that expands rule references down to byte-set elements.
#include "grammar/matcher.h"

#include <algorithm>

namespace spool::grammar {

CompiledGrammar::CompiledGrammar(Grammar g) : g_(std::move(g)) {
  validate_grammar(g_);
  starts_.resize(g_.rules.size());
  for (size_t r = 0; r < g_.rules.size(); ++r)
    for (const Sequence& alt : g_.rules[r].alts) {
      starts_[r].push_back((uint32_t)elems_.size());
      elems_.insert(elems_.end(), alt.begin(), alt.end());
      elems_.push_back({ElemKind::End, 0});
    }
  std::vector<int32_t> tops;
  bool accept = false;
  visited_.clear();
  for (uint32_t s : starts_[g_.root]) expand(s, -1, tops, accept);
  initial_ = intern(std::move(tops), accept);
}

int32_t CompiledGrammar::node(uint32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t)pos << 32 | (uint32_t)(parent + 1);
  auto [it, inserted] = node_ids_.try_emplace(key, (int32_t)nodes_.size());
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

// Follows rule references and ends of alternatives from (pos, parent) until
// byte-set elements, collecting those as stack tops.
void CompiledGrammar::expand(uint32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& accept) {
  const uint64_t key = (uint64_t)pos << 32 | (uint32_t)(parent + 1);
  if (!visited_.insert(key).second) return;
  const Element& e = elems_[pos];
  switch (e.kind) {
    case ElemKind::Bytes:
      tops.push_back(node(pos, parent));
      return;
    case ElemKind::End:
      if (parent < 0) accept = true;
      else expand(nodes_[parent].pos, nodes_[parent].parent, tops, accept);
      return;
    case ElemKind::Rule: {
      // A reference in tail position returns straight to our caller.
      const int32_t cont = elems_[pos + 1].kind == ElemKind::End ? parent : node(pos + 1, parent);
      for (uint32_t s : starts_[e.value]) expand(s, cont, tops, accept);
      return;
    }
  }
}

int32_t CompiledGrammar::intern(std::vector<int32_t> tops, bool accept) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  if (tops.empty() && !accept) return kDeadState;
  std::string key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(int32_t));
  key += accept ? '1' : '0';
  auto [it, inserted] = state_ids_.try_emplace(std::move(key), (int32_t)states_.size());
  if (inserted) states_.push_back({std::move(tops), accept, {}});
  return it->second;
}

int32_t CompiledGrammar::advance_locked(int32_t state, uint8_t byte) {
  if (state < 0) return kDeadState;
  if (states_[state].next.empty()) states_[state].next.assign(256, kUnknown);
  if (const int32_t cached = states_[state].next[byte]; cached != kUnknown) return cached;
  std::vector<int32_t> tops;
  bool accept = false;
  visited_.clear();
  const std::vector<int32_t> from = states_[state].tops;  // states_ may grow below
  for (int32_t n : from) {
    const Node nd = nodes_[n];
    if (g_.byte_sets[elems_[nd.pos].value].has(byte)) expand(nd.pos + 1, nd.parent, tops, accept);
  }
  const int32_t next = intern(std::move(tops), accept);
  states_[state].next[byte] = next;
  return next;
}

int32_t CompiledGrammar::advance(int32_t state, uint8_t byte) {
  std::lock_guard<std::mutex> lock(mu_);
  return advance_locked(state, byte);
}

int32_t CompiledGrammar::advance(int32_t state, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (unsigned char b : bytes) {
    state = advance_locked(state, b);
    if (state < 0) break;
  }
  return state;
}

bool CompiledGrammar::accepting(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_locked(state);
}

bool CompiledGrammar::complete(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return state >= 0 && states_[state].accept && states_[state].tops.empty();
}

size_t CompiledGrammar::n_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return states_.size();
}

size_t CompiledGrammar::n_stack_nodes() {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.size();
}

}  // namespace spool::grammar
