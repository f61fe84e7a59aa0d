// The grammar engine: GBNF syntax (grammars written here: JSON, arithmetic,
// a list, a C-like toy), errors that name the problem, UTF-8 classes, and
// token masks against a brute-force reference (each token's bytes run through
// the matcher one by one) on real vocabularies.
#include <gtest/gtest.h>

#include <random>

#include "format/gguf.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"

using namespace spool;
using namespace spool::grammar;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;

const char* kJson = R"GBNF(
# JSON, as a test grammar
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::=
  "{" ws (
    string ws ":" ws value ws
    ("," ws string ws ":" ws value ws)*
  )? "}"
array  ::= "[" ws (value ws ("," ws value ws)*)? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ([0-9] | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws     ::= [ \t\n]*
)GBNF";

const char* kArith = R"GBNF(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= num | "(" expr ")"   # parenthesised
num ::= [0-9]+
)GBNF";

const char* kList = R"GBNF(root ::= item{1,3}
item ::= "- " [a-z]+ "\n"
)GBNF";

const char* kToyC = R"GBNF(
root ::= func+
func ::= type " " ident "(" params? ")" " "? block
type ::= "int" | "void" | "char" "*"?
params ::= type " " ident ("," " "? type " " ident)*
block ::= "{" stmt* "}"
stmt ::= "return" (" " expr)? ";" | type " " ident " = " expr ";" | block
expr ::= ident | [0-9]+ | ident "(" (expr ("," expr)*)? ")"
ident ::= [a-zA-Z_] [a-zA-Z_0-9]{0,15}
)GBNF";

CompiledGrammar compile(const char* text) { return CompiledGrammar(parse_gbnf(text)); }

}  // namespace

TEST(GrammarParse, JsonGrammarMatches) {
  CompiledGrammar g = compile(kJson);
  for (const char* ok : {R"({"a": [1, 2.5e3, true, null], "b": {"c": "x\n\u00e9"}})", "[]", "-0.5", "\"\"",
                         "{ }", "\"caf\xC3\xA9\""})
    EXPECT_TRUE(g.matches(ok)) << ok;
  for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "01x", "\"\\q\"", "tru", "\"a\x01\"", "\"\xC3\""})
    EXPECT_FALSE(g.matches(bad)) << bad;
}

TEST(GrammarParse, ArithmeticListAndToyC) {
  CompiledGrammar a = compile(kArith);
  EXPECT_TRUE(a.matches("1+2*(3-4)/5"));
  EXPECT_TRUE(a.matches("((7))"));
  EXPECT_FALSE(a.matches("1+"));
  EXPECT_FALSE(a.matches("(1"));
  CompiledGrammar l = compile(kList);
  EXPECT_TRUE(l.matches("- a\n"));
  EXPECT_TRUE(l.matches("- a\n- bc\n- d\n"));
  EXPECT_FALSE(l.matches(""));
  EXPECT_FALSE(l.matches("- a\n- b\n- c\n- d\n"));
  CompiledGrammar c = compile(kToyC);
  EXPECT_TRUE(c.matches("int main(){return 0;}"));
  EXPECT_TRUE(c.matches("void f(int a, char* b) {int x = g(a,1);{}}int h(){return;}"));
  EXPECT_FALSE(c.matches("int main(){return 0}"));
  EXPECT_FALSE(c.matches("int 9x(){}"));
}

TEST(GrammarParse, RepetitionCounts) {
  CompiledGrammar g = compile("root ::= \"a\"{2,4} \"b\"{3} \"c\"{,1} \"d\"{1,}");
  EXPECT_TRUE(g.matches("aabbbd"));
  EXPECT_TRUE(g.matches("aaaabbbcdd"));
  EXPECT_FALSE(g.matches("abbbd"));
  EXPECT_FALSE(g.matches("aaaaabbbd"));
  EXPECT_FALSE(g.matches("aabbd"));
  EXPECT_FALSE(g.matches("aabbbccd"));
  EXPECT_FALSE(g.matches("aabbb"));
}

TEST(GrammarParse, Utf8Classes) {
  CompiledGrammar g = compile("root ::= [α-ω]+ [^a-z] \"\\u00e9\" .");
  EXPECT_TRUE(g.matches("αβω!é\xF0\x9F\x98\x80"));    // ends with U+1F600
  EXPECT_TRUE(g.matches("λ\xE4\xB8\xADé\xE2\x82\xAC"));  // 中, €
  EXPECT_FALSE(g.matches("αaé!"));
  EXPECT_FALSE(g.matches("α!é\xED\xA0\x80"));  // an encoded surrogate is not UTF-8
  EXPECT_FALSE(g.matches("α!é\xC0\xAF"));      // overlong
  // A token may end inside a character: the state after the first byte is alive.
  const int32_t s = g.advance(g.initial_state(), std::string("\xCE"));
  EXPECT_NE(s, kDeadState);
  EXPECT_NE(g.advance(s, std::string("\xB1")), kDeadState);  // α
  EXPECT_EQ(g.advance(s, std::string("\x41")), kDeadState);
}

TEST(GrammarParse, ErrorsNameTheProblem) {
  auto message = [](const char* text) {
    try {
      parse_gbnf(text);
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("root ::= foo").find("'foo' is used but never defined"), std::string::npos);
  EXPECT_NE(message("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"").find("'expr' is left-recursive"),
            std::string::npos);
  EXPECT_NE(message("root ::= \"abc").find("line 1, column 10: unterminated string literal"), std::string::npos);
  EXPECT_NE(message("root ::= [a-z").find("unterminated character class"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\nx ::= \"\\q\"").find("line 2, column 8: unknown escape"), std::string::npos);
  EXPECT_NE(message("item ::= \"a\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(message("root ::= (\"a\" | \"b\"").find("unclosed '('"), std::string::npos);
  EXPECT_NE(message("root ::= * \"a\"").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  // Nullable loops and tail recursion are fine.
  EXPECT_TRUE(compile("root ::= (\"a\"?)* \"b\"").matches("aab"));
  EXPECT_TRUE(compile("root ::= \"x\" root | \"\"").matches("xxx"));
}

TEST(GrammarParse, StatesAreSharedAcrossRepeats) {
  CompiledGrammar g = compile(kJson);
  const int32_t a = g.advance(g.initial_state(), std::string("\"abc"));
  const int32_t b = g.advance(g.initial_state(), std::string("\"abcdefgh"));
  EXPECT_EQ(a, b);  // the same stack inside a string: one interned state
  const int32_t deep1 = g.advance(g.initial_state(), std::string("[[[[\"x"));
  const int32_t deep2 = g.advance(g.initial_state(), std::string("[[[[\"xyz"));
  EXPECT_EQ(deep1, deep2);
  EXPECT_NE(a, deep1);
}

// ---- masks against the brute-force reference ----

namespace {

std::unique_ptr<Tokenizer> vocab_file(const std::string& name) {
  return load_tokenizer(gguf::open(kShared + "/models/llama.cpp-vocab/ggml-vocab-" + name + ".gguf"));
}

// Every token decided by running its bytes through the matcher.
void expect_mask_matches_reference(TokenMasker& m, CompiledGrammar& g, int32_t state, const std::string& what) {
  const TokenMask mask = *m.mask(state);
  const VocabIndex& v = m.vocab();
  int n_allowed = 0, n_wrong = 0;
  for (int32_t id = 0; id < v.n_vocab; ++id) {
    bool ref;
    if (std::find(v.eog.begin(), v.eog.end(), id) != v.eog.end()) ref = g.accepting(state);
    else ref = !v.bytes[id].empty() && g.advance(state, v.bytes[id]) != kDeadState;
    n_allowed += ref;
    if (ref != mask_has(mask, id) && ++n_wrong <= 5)
      ADD_FAILURE() << what << ": token " << id << " '" << v.bytes[id] << "' mask " << mask_has(mask, id)
                    << " reference " << ref;
  }
  EXPECT_EQ(n_wrong, 0) << what;
  (void)n_allowed;
}

}  // namespace

TEST(TokenMask, MatchesBruteForceOnRealVocabularies) {
  for (const std::string name : {"llama-spm", "gpt-2", "deepseek-coder", "phi-3"}) {
    auto tok = vocab_file(name);
    auto vocab = VocabIndex::build(*tok);
    for (const char* grammar : {kJson, kArith, kToyC}) {
      auto g = std::make_shared<CompiledGrammar>(parse_gbnf(grammar));
      TokenMasker masker(g, vocab);
      // Walk a random path: at each step check the mask, then take a random allowed token.
      std::mt19937 rng(42);
      int32_t state = g->initial_state();
      for (int step = 0; step < 12 && state >= 0; ++step) {
        expect_mask_matches_reference(masker, *g, state, name + " step " + std::to_string(step));
        const TokenMask mask = *masker.mask(state);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->n_vocab; ++id)
          if (mask_has(mask, id) && !vocab->bytes[id].empty()) allowed.push_back(id);
        if (allowed.empty()) break;
        state = masker.advance(state, allowed[rng() % allowed.size()]);
        ASSERT_NE(state, kDeadState);
      }
    }
  }
}

TEST(TokenMask, EosOnlyWhenAccepting) {
  auto tok = vocab_file("llama-spm");
  auto vocab = VocabIndex::build(*tok);
  auto g = std::make_shared<CompiledGrammar>(parse_gbnf("root ::= \"ab\" \"c\"?"));
  TokenMasker masker(g, vocab);
  const int32_t eos = tok->eos();
  EXPECT_FALSE(mask_has(*masker.mask(g->initial_state()), eos));
  const int32_t s = g->advance(g->initial_state(), std::string("ab"));
  EXPECT_TRUE(mask_has(*masker.mask(s), eos));
  EXPECT_FALSE(g->complete(s));
  EXPECT_TRUE(g->complete(g->advance(s, std::string("c"))));
  GrammarState st(std::make_shared<TokenMasker>(g, vocab));
  EXPECT_FALSE(st.accept(eos));
  masker.mask(s);
  EXPECT_GT(masker.mask_hits(), 0u);  // the second ask for a state is a cache hit
}
