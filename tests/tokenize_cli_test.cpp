// `spool tokenize` and `spool inspect` on a tokenizer alone, through the CLI
// binary: every llama.cpp vocab-only GGUF with test vectors gives exactly the
// ids of its .out file (as llama-tokenize --no-bos does), the vocab files
// without vectors and of architectures spool cannot run still tokenize, and
// a bare tokenizer.json gives the ids the HF tokenizers library gave.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using spool::test::slurp;
const std::string kShared = SPOOL_SHARED_DIR;
const std::string kVocabDir = kShared + "/models/llama.cpp-vocab/";

struct CliRun {
  int status = -1;
  std::string out, err;
};

CliRun spool(const std::string& dir, const std::string& args) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const int rc = std::system((std::string(SPOOL_BIN) + " " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The .inp file's texts: separated by "\n__ggml_vocab_test__\n" (the newline
// before the marker belongs to the separator).
std::vector<std::string> read_texts(const std::string& inp_path) {
  const std::string inp = slurp(inp_path), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    texts.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  return texts;
}

// "1 2 3" (the .out form) -> "1,2,3" (spool tokenize's form).
std::string to_csv(const std::string& ids) {
  std::istringstream in(ids);
  std::string out;
  for (std::string id; in >> id;) out += (out.empty() ? "" : ",") + id;
  return out;
}

// Writes each text to its own file and tokenizes them all in one run (one line of ids per -f).
std::vector<std::string> tokenize_texts(const std::string& dir, const std::string& model,
                                        const std::vector<std::string>& texts, const std::string& flags) {
  std::string args = "tokenize -m '" + model + "' " + flags;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string path = dir + "/text" + std::to_string(i);
    std::ofstream(path, std::ios::binary) << texts[i];
    args += " -f " + path;
  }
  const CliRun r = spool(dir, args);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
  return lines_of(r.out);
}

TEST(TokenizeCli, EveryVocabFileMatchesItsVectors) {
  spool::test::ScratchDir dir("spool-tokenize-cli");
  int n_files = 0;
  for (const auto& entry : fs::directory_iterator(kVocabDir)) {
    const std::string inp = entry.path().string();
    if (!inp.ends_with(".gguf.inp")) continue;
    const std::string gguf = inp.substr(0, inp.size() - 4);
    ++n_files;
    const std::vector<std::string> texts = read_texts(inp);
    const std::vector<std::string> expected = lines_of(slurp(gguf + ".out"));
    ASSERT_EQ(texts.size(), expected.size()) << inp << ": .inp and .out disagree on the number of texts";
    const std::vector<std::string> got = tokenize_texts(dir.path, gguf, texts, "--no-bos");
    ASSERT_EQ(got.size(), texts.size()) << gguf;
    int n_ok = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (got[i] == to_csv(expected[i])) {
        ++n_ok;
      } else {
        ADD_FAILURE() << gguf << ": text '" << texts[i] << "'\n  expected: " << to_csv(expected[i])
                      << "\n  actual:   " << got[i];
      }
    }
    std::printf("[ tokenize ] %s: %d/%zu texts match\n", fs::path(gguf).filename().c_str(), n_ok, texts.size());
  }
  EXPECT_GE(n_files, 10) << "expected the llama.cpp vocab files with .inp/.out in " << kVocabDir;
}

// Files spool has no forward() for (baichuan) or no test vectors (gpt-neox),
// and llama-spm, whose vocab file has no tensors: tokenize works, and BOS is
// added without --no-bos exactly when the file says so.
TEST(TokenizeCli, VocabOnlyFilesOfAnyArchitecture) {
  spool::test::ScratchDir dir("spool-tokenize-cli");
  for (const char* name : {"baichuan", "gpt-neox", "llama-spm", "bert-bge"}) {
    const std::string path = kVocabDir + "ggml-vocab-" + name + ".gguf";
    const CliRun plain = spool(dir.path, "tokenize -m " + path + " --no-bos -p 'Hello world'");
    ASSERT_EQ(plain.status, 0) << name << ": " << plain.err;
    ASSERT_FALSE(plain.out.empty()) << name;
    const CliRun with_bos = spool(dir.path, "tokenize -m " + path + " -p 'Hello world'");
    ASSERT_EQ(with_bos.status, 0) << name << ": " << with_bos.err;
    if (std::string(name) == "llama-spm" || std::string(name) == "baichuan") {
      EXPECT_EQ(with_bos.out, "1," + plain.out) << name << ": SentencePiece vocabs add BOS (id 1)";
    }
    const CliRun info = spool(dir.path, "inspect " + path);
    EXPECT_EQ(info.status, 0) << name << ": " << info.err;
    EXPECT_NE(info.out.find("vocab-only"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("tokenizer:     model"), std::string::npos) << info.out;
  }
}

TEST(TokenizeCli, TokenizerJsonAlone) {
  spool::test::ScratchDir dir("spool-tokenize-cli");
  const std::string tok_dir = kShared + "/fixtures/tok-qwen2";
  const nlohmann::json cases = nlohmann::json::parse(slurp(tok_dir + "/cases.json"));
  std::vector<std::string> texts, expected;
  for (const auto& c : cases["encode"]) {
    texts.push_back(c["text"].get<std::string>());
    std::string ids;
    for (const auto& id : c["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
    expected.push_back(ids);
  }
  ASSERT_FALSE(texts.empty());
  // The file itself, and a directory holding it (no config.json: not a model).
  fs::copy_file(tok_dir + "/tokenizer.json", dir.path + "/tokenizer.json");
  for (const std::string& model : {tok_dir + "/tokenizer.json", dir.path}) {
    const std::vector<std::string> got = tokenize_texts(dir.path, model, texts, "--no-bos");
    ASSERT_EQ(got.size(), texts.size()) << model;
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(got[i], expected[i]) << model << ": '" << texts[i] << "'";
  }
  const CliRun info = spool(dir.path, "inspect " + tok_dir + "/tokenizer.json");
  EXPECT_EQ(info.status, 0) << info.err;
  EXPECT_NE(info.out.find("tokenizer.json"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("model gpt2"), std::string::npos) << info.out;
}

TEST(TokenizeCli, BadInputIsOneClearError) {
  spool::test::ScratchDir dir("spool-tokenize-cli");
  const CliRun missing = spool(dir.path, "tokenize -m " + dir.path + "/nope.gguf -p hi");
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.err.find("nope.gguf"), std::string::npos) << missing.err;
  const CliRun two = spool(dir.path, "tokenize -m " + kVocabDir + "ggml-vocab-gpt-2.gguf -p hi --stdin </dev/null");
  EXPECT_NE(two.status, 0);
  EXPECT_NE(two.err.find("exactly one of"), std::string::npos) << two.err;
  std::ofstream(dir.path + "/tokenizer.json") << "{\"model\": 3}";
  const CliRun bad = spool(dir.path, "tokenize -m " + dir.path + "/tokenizer.json -p hi");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("tokenizer.json"), std::string::npos) << bad.err;
}

}  // namespace
