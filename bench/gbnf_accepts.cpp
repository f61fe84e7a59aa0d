// Reference check against the peer: does llama.cpp's own grammar engine accept
// a text under a GBNF grammar? Reads the grammar from argv[1] and the text from
// stdin; exit 0 when every byte is accepted (and, with --complete, the grammar
// can end there), 1 when llama.cpp rejects it, 2 on a usage or grammar error.
// Built against a llama.cpp checkout by bench/gbnf_check.sh (its internal
// grammar API, exported by libllama); not part of spool.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>

#include "llama-grammar.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s GRAMMAR.gbnf [--complete] < TEXT\n", argv[0]);
    return 2;
  }
  const bool complete = argc > 2 && std::strcmp(argv[2], "--complete") == 0;
  std::ifstream f(argv[1]);
  std::stringstream g;
  g << f.rdbuf();
  const std::string grammar = g.str();
  const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  llama_grammar* gr = llama_grammar_init_impl(nullptr, grammar.c_str(), "root", false, nullptr, 0, nullptr, 0);
  if (!gr) {
    std::fprintf(stderr, "llama.cpp could not parse %s\n", argv[1]);
    return 2;
  }
  int rc = 0;
  try {
    llama_grammar_accept_str(*gr, text);
    if (complete) {
      bool can_end = false;
      for (const auto& stack : llama_grammar_get_stacks(gr)) can_end = can_end || stack.empty();
      if (!can_end) {
        std::fprintf(stderr, "llama.cpp accepts the text as a prefix only: the grammar cannot end there\n");
        rc = 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama.cpp rejects the text: %s\n", e.what());
    rc = 1;
  }
  llama_grammar_free_impl(gr);
  return rc;
}
