// Regular expressions -> GBNF: literals, ., [classes] with ranges and ^,
// \d \w \s (and negations), groups (capturing or (?:...)), |, and the
// quantifiers * + ? {m} {m,} {m,n} (lazy suffixes are accepted and ignored:
// only the language matters). ^ and $ are accepted at the ends only; the
// pattern always matches the whole text (for a JSON Schema "pattern", which
// searches, a whole match is one of the valid strings). Backreferences and
// lookarounds are not regular and are rejected with a GrammarError.
#pragma once

#include <string>
#include <string_view>

namespace spool::grammar {

// A GBNF expression (no rule definitions) for the regex. With json_string,
// the expression matches the regex's strings written inside a JSON string:
// '"' and '\' come out escaped and control characters are excluded.
std::string regex_to_gbnf_expr(std::string_view regex, bool json_string);

// A whole GBNF grammar ("root ::= ...") for the regex.
std::string regex_to_gbnf(std::string_view regex);

}  // namespace spool::grammar
