// Grammar checks before a grammar is compiled: every referenced rule is
// defined, no rule is left-recursive (the matcher expands rules top-down, so
// a left-recursive rule would never stop expanding), and every rule the root
// reaches can end.
#include "grammar/grammar.h"

namespace spool::grammar {

namespace {

// Every rule the root reaches must be able to end (match some finite text).
// One that cannot (`root ::= root`, `x ::= "a" x`, a JSON Schema {"$ref": "#"})
// leaves decoding with no token to pick, or no way to stop: a mistake in the
// grammar, refused here rather than failing the request later.
void check_rules_end(const Grammar& g) {
  const size_t n = g.rules.size();
  std::vector<char> ends(n, 0);  // by fixpoint: an alternative of only bytes and rules that end
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (ends[i]) continue;
      for (const Sequence& alt : g.rules[i].alts) {
        bool all = true;
        for (const Element& e : alt)
          if (e.kind == ElemKind::Rule && !ends[e.value]) { all = false; break; }
        if (all) { ends[i] = 1; changed = true; break; }
      }
    }
  }
  if (g.root >= n) return;
  std::vector<char> reached(n, 0);
  std::vector<uint32_t> todo{g.root};
  reached[g.root] = 1;
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    if (!ends[r])
      throw GrammarError("grammar: rule '" + g.rules[r].name + "' can never end (every alternative recurses with "
                         "no way out, so it matches no finite text); give the recursion an alternative that ends");
    for (const Sequence& alt : g.rules[r].alts)
      for (const Element& e : alt)
        if (e.kind == ElemKind::Rule && !reached[e.value]) { reached[e.value] = 1; todo.push_back(e.value); }
  }
}

}  // namespace

void validate_grammar(const Grammar& g) {
  const size_t n = g.rules.size();
  for (const Rule& r : g.rules)
    if (!r.defined) throw GrammarError("grammar: rule '" + r.name + "' is used but never defined");
  // Nullable rules (can match the empty string), by fixpoint.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (nullable[i]) continue;
      for (const Sequence& alt : g.rules[i].alts) {
        bool all = true;
        for (const Element& e : alt)
          if (e.kind != ElemKind::Rule || !nullable[e.value]) { all = false; break; }
        if (all) { nullable[i] = 1; changed = true; break; }
      }
    }
  }
  // Left-corner edges. A cycle of them is harmless when every edge is a tail
  // reference (the matcher's tail call keeps the caller's continuation, so
  // reaching the same position again is caught as a repeat); one non-tail
  // edge on a cycle makes the stack grow forever.
  std::vector<std::vector<uint32_t>> left(n);
  std::vector<std::pair<uint32_t, uint32_t>> non_tail;
  for (uint32_t i = 0; i < n; ++i)
    for (const Sequence& alt : g.rules[i].alts)
      for (size_t k = 0; k < alt.size(); ++k) {
        const Element& e = alt[k];
        if (e.kind != ElemKind::Rule) break;
        left[i].push_back(e.value);
        if (k + 1 < alt.size()) non_tail.push_back({i, e.value});
        if (!nullable[e.value]) break;
      }
  std::vector<uint32_t> seen(n, UINT32_MAX);
  for (size_t q = 0; q < non_tail.size(); ++q) {
    const auto [from, to] = non_tail[q];
    std::vector<uint32_t> todo{to};
    seen[to] = (uint32_t)q;
    while (!todo.empty()) {
      const uint32_t r = todo.back();
      todo.pop_back();
      if (r == from)
        throw GrammarError("grammar: rule '" + g.rules[from].name + "' is left-recursive (it can reach itself "
                           "without consuming input); rewrite it with repetition");
      for (uint32_t s : left[r])
        if (seen[s] != (uint32_t)q) { seen[s] = (uint32_t)q; todo.push_back(s); }
    }
  }
  check_rules_end(g);
}

}  // namespace spool::grammar
