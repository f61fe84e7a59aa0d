// Parser of the Jinja-subset template engine: lexer tokens to a statement tree.
// Operator precedence follows Jinja's own parser (ternary < or < and < not <
// comparisons < + - < ~ < * / // % < ** < unary < filters/tests < postfix).
#pragma once

#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"

namespace spool::jinja {

// Throws spool::Error naming the line and column of the first syntax error.
Body parse(const std::vector<Token>& tokens);

}  // namespace spool::jinja
