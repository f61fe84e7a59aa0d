// tokenizer.json -> tokenizer.ggml.* metadata: vocabulary and added tokens
// (special -> control, others user-defined), merges, the pre-tokenizer name
// whose split regexes the file declares, BOS/EOS from tokenizer_config.json and
// the post-processor, end-of-generation ids from generation_config.json, and
// the chat template.
#include "text/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "text/pretokenizer.h"

namespace spool {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using gguf::Value;

[[noreturn]] void fail(const std::string& why) { throw Error("tokenizer.json: " + why); }

// GGUF token types (llama.cpp's llama_token_type).
enum : int64_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

// The pre-tokenizer name llama.cpp would give this tokenizer.json.
std::string pre_tokenizer_name(const json& pre) {
  if (pre.is_null()) fail("no pre_tokenizer (only byte-level BPE is supported)");
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel") {
    if (!pre.value("use_regex", true)) fail("ByteLevel pre-tokenizer without a split regex is not supported");
    return "gpt-2";
  }
  if (type != "Sequence") fail("pre_tokenizer type '" + type + "' is not supported");
  std::vector<std::string> patterns;
  bool byte_level = false;
  for (const json& p : pre.at("pretokenizers")) {
    const std::string t = p.value("type", "");
    if (t == "Split") {
      if (p.value("behavior", "") != "Isolated" || p.value("invert", false) || !p.at("pattern").contains("Regex"))
        fail("only Split pre-tokenizers with an isolated regex are supported");
      patterns.push_back(p.at("pattern").at("Regex").get<std::string>());
    } else if (t == "ByteLevel") {
      byte_level = true;
      if (p.value("use_regex", true)) {
        if (patterns.empty()) return "gpt-2";
        fail("a ByteLevel pre-tokenizer with its own regex after Split is not supported");
      }
    } else {
      fail("pre-tokenizer '" + t + "' is not supported");
    }
  }
  if (!byte_level) fail("only byte-level BPE is supported (no ByteLevel pre-tokenizer)");
  const std::string name = PreTokenizer::name_for_patterns(patterns);
  if (name.empty()) fail("the pre-tokenizer split regex is not one spool knows: " + (patterns.empty() ? "" : patterns[0]));
  return name;
}

void check_model(const json& j) {
  const json& model = j.at("model");
  if (model.value("type", "") != "BPE") fail("model type '" + model.value("type", "") + "' is not supported (BPE)");
  if (model.value("byte_fallback", false)) fail("byte_fallback BPE (SentencePiece-style) is not supported yet");
  const json& norm = j.value("normalizer", json());
  if (!norm.is_null() && norm.value("type", "") != "NFC")
    fail("normalizer '" + norm.value("type", "") + "' is not supported (none or NFC)");
}

// A token id as written in tokenizer.json: a JSON integer (a float would be
// converted with undefined behaviour when out of range).
int64_t json_token_id(const json& v) {
  if (!v.is_number_integer()) fail("token id " + v.dump() + " is not an integer");
  return v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
}

// Token texts and types by id, padded with unused tokens to n_vocab.
void read_vocab(const json& j, int64_t n_vocab, std::vector<std::string>& text, std::vector<int64_t>& type) {
  auto put = [&](int64_t id, const std::string& t, int64_t ty) {
    if (id < 0 || id > (1 << 24)) fail("token id " + std::to_string(id) + " is out of range");
    if ((int64_t)text.size() <= id) {
      text.resize(id + 1);
      type.resize(id + 1, 0);
    }
    text[id] = t;
    type[id] = ty;
  };
  for (const auto& [t, id] : j.at("model").at("vocab").items()) put(json_token_id(id), t, kNormal);
  for (const json& a : j.value("added_tokens", json::array()))
    put(json_token_id(a.at("id")), a.at("content").get<std::string>(), a.value("special", false) ? kControl : kUserDefined);
  if (n_vocab > 0 && (int64_t)text.size() > n_vocab)
    fail("has " + std::to_string(text.size()) + " tokens but the model's embedding has only " +
         std::to_string(n_vocab) + " rows");
  if ((int64_t)text.size() < n_vocab) {
    text.resize(n_vocab);
    type.resize(n_vocab, 0);
  }
  for (size_t id = 0; id < text.size(); ++id)
    if (type[id] == 0) {  // a hole in the ids, or padding up to the embedding size
      text[id] = "[PAD" + std::to_string(id) + "]";
      type[id] = kUnused;
    }
}

std::vector<std::string> read_merges(const json& j) {
  std::vector<std::string> merges;
  for (const json& m : j.at("model").at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  return merges;
}

// tokenizer_config.json writes special tokens as a string or {"content": ...}.
std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return "";
}

int64_t id_of(const std::vector<std::string>& text, const std::string& t) {
  if (t.empty()) return -1;
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == t) return (int64_t)i;
  return -1;
}

// ids of a generation_config / config "eos_token_id" (an int or a list).
std::vector<int64_t> id_list(const json& v) {
  std::vector<int64_t> out;
  if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  if (v.is_array())
    for (const json& x : v) if (x.is_number_integer()) out.push_back(x.get<int64_t>());
  return out;
}

// BOS/EOS ids and whether they are added: tokenizer_config.json first, then
// the TemplateProcessing post-processor (what HF actually does when encoding).
void special_tokens(const json& tok, const json& tcfg, const json& gen, const std::vector<std::string>& text,
                    gguf::File& f) {
  int64_t bos = id_of(text, token_content(tcfg.value("bos_token", json())));
  int64_t eos = id_of(text, token_content(tcfg.value("eos_token", json())));
  const std::vector<int64_t> gen_eos = id_list(gen.value("eos_token_id", json()));
  if (bos < 0) if (auto b = id_list(gen.value("bos_token_id", json())); !b.empty()) bos = b[0];
  if (eos < 0 && !gen_eos.empty()) eos = gen_eos[0];
  bool add_bos = false, add_eos = false;
  json post = tok.value("post_processor", json());
  if (post.is_object() && post.value("type", "") == "Sequence")
    for (const json& p : post.value("processors", json::array()))
      if (p.value("type", "") == "TemplateProcessing") post = p;
  if (post.is_object() && post.value("type", "") == "TemplateProcessing") {
    const json& single = post.at("single");
    for (size_t k = 0; k < single.size(); ++k) {
      if (!single[k].contains("SpecialToken")) continue;
      const int64_t id = id_of(text, single[k]["SpecialToken"].at("id").get<std::string>());
      if (k == 0) { add_bos = true; bos = id; } else { add_eos = true; eos = id; }
    }
  }
  if (tcfg.contains("add_bos_token") && tcfg["add_bos_token"].is_boolean()) add_bos = tcfg["add_bos_token"];
  if (tcfg.contains("add_eos_token") && tcfg["add_eos_token"].is_boolean()) add_eos = tcfg["add_eos_token"];
  if (bos >= 0) f.kv["tokenizer.ggml.bos_token_id"] = Value::of_int(bos, gguf::ValueType::UINT32);
  if (eos >= 0) f.kv["tokenizer.ggml.eos_token_id"] = Value::of_int(eos, gguf::ValueType::UINT32);
  f.kv["tokenizer.ggml.add_bos_token"] = Value::of_bool(add_bos);
  f.kv["tokenizer.ggml.add_eos_token"] = Value::of_bool(add_eos);
  if (!gen_eos.empty()) f.kv[kEogIdsKey] = Value::of_ints(gen_eos);
}

// tokenizer_config.json "chat_template" (a string, or named templates), else chat_template.jinja.
void chat_template(const fs::path& dir, const json& tcfg, gguf::File& f) {
  const json ct = tcfg.value("chat_template", json());
  std::string tmpl;
  if (ct.is_string()) tmpl = ct.get<std::string>();
  if (ct.is_array())
    for (const json& t : ct)
      if (t.value("name", "") == "default") tmpl = t.value("template", "");
  if (tmpl.empty() && fs::exists(dir / "chat_template.jinja")) {
    std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
    tmpl.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!tmpl.empty()) f.kv["tokenizer.chat_template"] = Value::of_string(tmpl);
}

json optional_json(const fs::path& p) { return fs::exists(p) ? hf::read_json(p.string()) : json::object(); }

}  // namespace

void add_hf_tokenizer_metadata(const std::string& dir_str, int64_t n_vocab, gguf::File& f) {
  const fs::path dir = dir_str;
  const fs::path path = dir / "tokenizer.json";
  if (!fs::exists(path)) throw Error("'" + dir_str + "' has no tokenizer.json");
  try {
    const json tok = hf::read_json(path.string());
    check_model(tok);
    std::vector<std::string> text;
    std::vector<int64_t> type;
    read_vocab(tok, n_vocab, text, type);
    f.kv["tokenizer.ggml.model"] = Value::of_string("gpt2");
    f.kv["tokenizer.ggml.pre"] = Value::of_string(pre_tokenizer_name(tok.value("pre_tokenizer", json())));
    f.kv["tokenizer.ggml.merges"] = Value::of_strings(read_merges(tok));
    special_tokens(tok, optional_json(dir / "tokenizer_config.json"), optional_json(dir / "generation_config.json"),
                   text, f);
    chat_template(dir, optional_json(dir / "tokenizer_config.json"), f);
    f.kv["tokenizer.ggml.token_type"] = Value::of_ints(std::move(type));
    f.kv["tokenizer.ggml.tokens"] = Value::of_strings(std::move(text));
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + path.string() + "': unexpected structure: " + e.what());
  } catch (const Error& e) {
    throw Error("'" + dir_str + "': " + e.what());
  }
}

}  // namespace spool
