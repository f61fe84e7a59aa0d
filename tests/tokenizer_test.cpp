// Tokenizer tests: llama.cpp's vocabulary test vectors (every text of every
// ggml-vocab-*.gguf must give exactly the expected ids, tokenized as
// test-tokenizer-0 does: no BOS, special tokens not parsed), decode round
// trips, special tokens, streaming decode and errors on malformed metadata.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "format/gguf.h"
#include "text/hf_tokenizer.h"
#include "text/pretokenizer.h"
#include "text/text_stream.h"
#include "text/tokenizer.h"
#include "text/unicode_regex.h"
#include "text/unicode_util.h"

namespace spool {
namespace {

const std::string kVocabDir = std::string(SPOOL_SHARED_DIR) + "/models/llama.cpp-vocab/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Texts are separated by "\n__ggml_vocab_test__\n": the newline before the
// marker belongs to the separator, so "a\n\n__ggml..." is the text "a\n".
std::vector<VocabCase> read_cases(const std::string& vocab) {
  const std::string inp = read_file(kVocabDir + "ggml-vocab-" + vocab + ".gguf.inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(kVocabDir + "ggml-vocab-" + vocab + ".gguf.out");
  std::vector<VocabCase> cases;
  size_t i = 0;
  for (std::string line; std::getline(out, line); ++i) {
    VocabCase c;
    c.text = i < texts.size() ? texts[i] : "";
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << vocab << ": .inp and .out disagree on the number of texts";
  return cases;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

std::unique_ptr<Tokenizer> load_vocab_file(const std::string& name) {
  return load_tokenizer(gguf::open(kVocabDir + "ggml-vocab-" + name + ".gguf"));
}

bool is_bpe(const std::string& v) {
  return v != "llama-spm" && v != "phi-3" && v != "bert-bge" && v != "baichuan";
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, EveryTextGivesTheExpectedIds) {
  const std::string vocab = GetParam();
  auto tok = load_vocab_file(vocab);
  const auto cases = read_cases(vocab);
  ASSERT_FALSE(cases.empty());
  int n_fail = 0;
  for (const auto& c : cases) {
    const auto got = tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    if (got != c.ids) {
      ++n_fail;
      ADD_FAILURE() << vocab << ": text '" << c.text << "'\n  expected: " << ids_str(c.ids)
                    << "\n  actual:   " << ids_str(got);
    }
  }
  std::printf("[ vocab    ] %s: %zu/%zu texts match\n", vocab.c_str(), cases.size() - n_fail, cases.size());
}

// WordPiece (bert-bge) lowercases and drops spaces, so it is not in the round-trip list.
class LosslessVocabs : public VocabVectors {};
TEST_P(LosslessVocabs, DecodeRoundTrips) {
  const std::string vocab = GetParam();
  auto tok = load_vocab_file(vocab);
  for (const auto& c : read_cases(vocab)) {
    const std::string decoded = tok->decode(tok->encode(c.text, false, false));
    // SentencePiece adds its space prefix; the caller strips it if it wants.
    const std::string expected = is_bpe(vocab) || c.text.empty() ? c.text : " " + c.text;
    EXPECT_EQ(decoded, expected) << vocab;
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, VocabVectors,
                         ::testing::Values("gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "mpt",
                                           "refact", "llama-spm", "phi-3", "bert-bge"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });
INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, LosslessVocabs,
                         ::testing::Values("gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "mpt",
                                           "refact", "llama-spm", "phi-3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Tokenizer, VocabsWithoutVectorsLoadAndRoundTrip) {
  // gpt-neox has no tokenizer.ggml.pre (the "default" pre-tokenizer) and
  // baichuan is SentencePiece with 64K pieces; neither ships test vectors.
  const std::string text = "Hello world!\n  The 12345 quick 🦙s\tdon't—jump über Ünïcödé 我想在apple工作";
  auto neox = load_vocab_file("gpt-neox");
  EXPECT_EQ(neox->decode(neox->encode(text, false, false)), text);
  EXPECT_EQ(neox->eos(), 0);
  auto baichuan = load_vocab_file("baichuan");
  EXPECT_EQ(baichuan->decode(baichuan->encode(text, false, false)), " " + text);
  auto ids = baichuan->encode(text, true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], baichuan->bos());

  // Ids from llama.cpp's llama-tokenize (add_special on, as its default).
  const std::string probe = "Hello world!\n  The 12345 quick 🦙s\tdon't—jump über";
  EXPECT_EQ(ids_str(baichuan->encode(probe, true, false)),
            "1 24568 1275 80 5 31106 776 31106 53 54 55 56 57 2735 31106 56940 31114 6 11265 31155 31108 31220 "
            "31156 1717 26722");
  EXPECT_EQ(ids_str(neox->encode(probe, true, false)),
            "12092 1533 2 187 50276 510 209 10683 1857 3158 22692 101 236 84 186 9903 8 85 1128 48742 20150");
}

TEST(Tokenizer, Stories260kOnceUponATime) {
  auto tok = load_tokenizer(gguf::open(std::string(SPOOL_SHARED_DIR) + "/models/stories260K.gguf"));
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_TRUE(tok->add_bos());
  const auto ids = tok->encode("Once upon a time", /*add_special=*/true, /*parse_special=*/false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  std::string pieces;
  for (size_t i = 1; i < ids.size(); ++i) pieces += "[" + tok->token_text(ids[i]) + "]";
  // llama.cpp's llama-tokenize gives 1 403 407 261 378.
  EXPECT_EQ(pieces, "[▁Once][▁upon][▁a][▁time]") << ids_str(ids);
  EXPECT_EQ(ids_str(ids), "1 403 407 261 378");
  EXPECT_EQ(tok->decode(ids), " Once upon a time");
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
}

TEST(Tokenizer, SpmPiecesAndSpecialTokens) {
  auto tok = load_vocab_file("llama-spm");
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(tok->token_to_piece(1), "");
  EXPECT_EQ(tok->token_to_piece(1, /*render_special=*/true), "<s>");
  // Control tokens are text unless parse_special; BOS only with add_special.
  auto plain = tok->encode("<s>Hi", true, false);
  auto parsed = tok->encode("<s>Hi", false, true);
  EXPECT_EQ(plain[0], 1);
  EXPECT_NE(plain[1], 1);
  EXPECT_EQ(parsed[0], 1);
  EXPECT_EQ(tok->decode(parsed), " Hi");  // space prefix follows a special token
}

TEST(Tokenizer, Phi3EndOfGenerationAndRstrip) {
  auto tok = load_vocab_file("phi-3");
  EXPECT_TRUE(tok->is_eog(32000));  // <|endoftext|> = eos
  EXPECT_TRUE(tok->is_eog(32007));  // <|end|>
  EXPECT_FALSE(tok->is_eog(32010));
  // <|user|> swallows the whitespace after it (phi-3 rule).
  const auto a = tok->encode("<|user|>\n  Hi", false, true);
  const auto b = tok->encode("<|user|>Hi", false, true);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[0], 32010);
}

TEST(Tokenizer, BpeEogAndUserDefinedTokens) {
  auto gpt2 = load_vocab_file("gpt-2");
  EXPECT_TRUE(gpt2->is_eog(50256));
  EXPECT_EQ(gpt2->encode("<|endoftext|>", false, true), std::vector<int32_t>{50256});
  EXPECT_GT(gpt2->encode("<|endoftext|>", false, false).size(), 1u);
  EXPECT_FALSE(gpt2->add_bos());
  // mpt's whitespace runs are user-defined tokens: cut out even without parse_special.
  auto mpt = load_vocab_file("mpt");
  const auto ids = mpt->encode("a    b", false, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(mpt->token_text(ids[1]), "    ");
  EXPECT_EQ(mpt->decode(ids), "a    b");
}

TEST(Tokenizer, TextStreamHoldsBackPartialUtf8OfRealTokens) {
  auto tok = load_vocab_file("llama-spm");
  const std::string text = "naïve 🦙 llama 日本語";
  const auto ids = tok->encode(text, false, false);
  TextStream stream;
  std::string all;
  for (int32_t id : ids) {
    const std::string chunk = stream.push(tok->token_to_piece(id));
    // Every chunk must be complete UTF-8 on its own.
    size_t i = 0;
    while (i < chunk.size()) {
      const unsigned char c = chunk[i];
      const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      ASSERT_LE(i + len, chunk.size()) << "split character in chunk for id " << id;
      i += len;
    }
    all += chunk;
  }
  all += stream.flush();
  EXPECT_EQ(all, " " + text);
}

TEST(Tokenizer, PreTokenizerSplits) {
  auto words = [](const std::string& pre, const std::string& text) {
    std::string s;
    for (const auto& w : PreTokenizer(pre).split(text)) s += "[" + w + "]";
    return s;
  };
  EXPECT_EQ(words("gpt-2", "Hello, y'all!  It's 2024"), "[Hello][,][ y]['][all][!][ ][ It]['s][ 2024]");
  EXPECT_EQ(words("llama3", "I'M 12345 ok\n\n  x"), "[I]['M][ ][123][45][ ok][\n\n][ ][ x]");
  EXPECT_EQ(words("qwen2", "a 123"), "[a][ ][1][2][3]");
  EXPECT_THROW(PreTokenizer("no-such-pre"), Error);
}

// Length of the match of `pattern` at the start of `text`, or -1.
long regex_match(const std::string& pattern, const std::string& text) {
  const UnicodeRegex re(pattern);
  const auto cpts = unicode::decode_utf8(text);
  size_t end = 0;
  return re.match_at(cpts.data(), 0, cpts.size(), 0, &end) ? static_cast<long>(end) : -1;
}

TEST(Unicode, ValidUtf8ReplacesOnlyMalformedBytes) {
  EXPECT_EQ(unicode::valid_utf8("plain \xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82"), "plain \xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82");
  EXPECT_EQ(unicode::valid_utf8("a\xf7" "b"), "a\xef\xbf\xbd" "b");          // not a lead byte
  EXPECT_EQ(unicode::valid_utf8("\x80"), "\xef\xbf\xbd");                   // stray continuation
  EXPECT_EQ(unicode::valid_utf8("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");  // cut short
  EXPECT_EQ(unicode::valid_utf8(""), "");
}

TEST(UnicodeRegex, SemanticsNeededByPreTokenizers) {
  EXPECT_EQ(regex_match(R"(\s+(?!\S))", "   x"), 2);  // keeps the last space for the next word
  EXPECT_EQ(regex_match(R"(\s+(?!\S))", "   "), 3);
  EXPECT_EQ(regex_match(R"(\p{N}{1,3})", "12345"), 3);
  EXPECT_EQ(regex_match("(?i:'s|'ll)", "'LL"), 3);
  EXPECT_EQ(regex_match("'s|'ll", "'LL"), -1);
  EXPECT_EQ(regex_match(R"([^\r\n\p{L}\p{N}]?\p{L}+)", "«Привет»"), 7);
  EXPECT_EQ(regex_match(R"(\s?[一-龥]+)", " 中国x"), 3);
  EXPECT_EQ(regex_match("a+?", "aaa"), 1);
  EXPECT_EQ(regex_match("a|ab", "ab"), 1);  // leftmost-first, not longest
  EXPECT_EQ(regex_match(R"(\s+$)", "  \n"), 3);
  EXPECT_EQ(regex_match(R"([\p{P}\$\+<=>\^~\|`]+)", "$+!?`x"), 5);
  EXPECT_THROW(UnicodeRegex("(a"), Error);
  EXPECT_THROW(UnicodeRegex("\\p{Han}"), Error);
  EXPECT_THROW(UnicodeRegex("(?:a?)*"), Error);  // would loop forever
}

// ---- Hugging Face tokenizer.json fixtures ------------------------------------

// tokenizer.json through the library's HF reader (text/hf_tokenizer.h), which
// must also recognise the pre-tokenizer from the file's split regex.
void check_hf_cases(const std::string& fixture, const std::string& pre) {
  const std::string dir = std::string(SPOOL_SHARED_DIR) + "/fixtures/" + fixture;
  gguf::File f;
  add_hf_tokenizer_metadata(dir, 0, f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), pre);
  auto tok = load_tokenizer(f);
  const auto cases = nlohmann::json::parse(read_file(dir + "/cases.json"));
  for (const auto& c : cases["encode"]) {
    const std::string text = c["text"];
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const auto got = tok->encode(text, /*add_special=*/false, /*parse_special=*/true);
    EXPECT_EQ(ids_str(got), ids_str(expected)) << fixture << ": '" << text << "'";
    EXPECT_EQ(tok->decode(got, /*render_special=*/true), c["decoded"].get<std::string>()) << fixture;
  }
}

TEST(Tokenizer, HuggingFaceQwen2Cases) { check_hf_cases("tok-qwen2", "qwen2"); }
TEST(Tokenizer, HuggingFaceLlama3Cases) { check_hf_cases("tok-llama3", "llama3"); }

// ---- malformed metadata -------------------------------------------------------

gguf::Value str_value(const std::string& s) {
  gguf::Value v;
  v.type = gguf::ValueType::STRING;
  v.s = s;
  return v;
}
gguf::Value str_array(const std::vector<std::string>& a) {
  gguf::Value v;
  v.type = gguf::ValueType::ARRAY;
  v.elem_type = gguf::ValueType::STRING;
  v.strings = a;
  return v;
}
gguf::Value float_array(const std::vector<double>& a) {
  gguf::Value v;
  v.type = gguf::ValueType::ARRAY;
  v.elem_type = gguf::ValueType::FLOAT32;
  v.floats = a;
  return v;
}

std::string load_error(const gguf::File& f) {
  try {
    load_tokenizer(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tokenizer, MalformedMetadataGivesClearErrors) {
  gguf::File f;
  EXPECT_NE(load_error(f).find("tokenizer.ggml.model"), std::string::npos);
  f.kv["tokenizer.ggml.model"] = str_value("llama");
  EXPECT_NE(load_error(f).find("missing tokenizer.ggml.tokens"), std::string::npos);
  f.kv["tokenizer.ggml.tokens"] = str_array({"<unk>", "<s>", "</s>", "a", "b", "ab"});
  f.kv["tokenizer.ggml.scores"] = float_array({0, 0, 0, 1});
  EXPECT_NE(load_error(f).find("tokenizer.ggml.scores has 4 entries"), std::string::npos) << load_error(f);
  f.kv["tokenizer.ggml.scores"] = float_array({0, 0, 0, 1, 1, 2});
  EXPECT_EQ(load_error(f), "(no error)");
  f.kv["tokenizer.ggml.tokens"] = str_array({"<unk>", "<s>", "</s>", "a", "b", "a"});
  EXPECT_NE(load_error(f).find("appears twice"), std::string::npos);

  f.kv["tokenizer.ggml.tokens"] = str_array({"a", "b", "ab"});
  f.kv.erase("tokenizer.ggml.scores");
  f.kv["tokenizer.ggml.model"] = str_value("gpt2");
  EXPECT_NE(load_error(f).find("tokenizer.ggml.merges"), std::string::npos);
  f.kv["tokenizer.ggml.merges"] = str_array({"a b", "a c"});
  EXPECT_NE(load_error(f).find("merges[1] 'a c' refers to a token that is not in the vocabulary"),
            std::string::npos)
      << load_error(f);
  f.kv["tokenizer.ggml.merges"] = str_array({"a b"});
  f.kv["tokenizer.ggml.pre"] = str_value("nonsense");
  EXPECT_NE(load_error(f).find("unsupported pre-tokenizer 'nonsense'"), std::string::npos);
  f.kv["tokenizer.ggml.pre"] = str_value("gpt-2");
  EXPECT_EQ(load_error(f), "(no error)");
  f.kv["tokenizer.ggml.model"] = str_value("t5");
  EXPECT_NE(load_error(f).find("unsupported tokenizer model 't5'"), std::string::npos);
}

}  // namespace
}  // namespace spool
