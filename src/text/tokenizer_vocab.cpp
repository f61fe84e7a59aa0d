// Loading the vocabulary shared by all tokenizer types from GGUF metadata, with
// llama.cpp's defaults and its name-based rules (which tokens end generation,
// which special tokens swallow neighbouring spaces), so that a GGUF behaves
// here as it does in llama.cpp. Also the special-token partition of input text.
#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "format/gguf.h"
#include "text/hf_tokenizer.h"
#include "text/tokenizer_vocab.h"

namespace spool {

namespace {

const char* kTokensKey = "tokenizer.ggml.tokens";

[[noreturn]] void fail(const std::string& why) { throw Error("tokenizer: " + why); }

// An optional per-token array: when present it must have one entry per token.
const gguf::Value* find_per_token_array(const gguf::File& f, const std::string& key, size_t n) {
  const gguf::Value* v = f.find(key);
  if (!v) return nullptr;
  if (!v->is_array()) fail(key + " is not an array");
  if (v->array_size() != n)
    fail(key + " has " + std::to_string(v->array_size()) + " entries but " + kTokensKey + " has " +
         std::to_string(n));
  return v;
}

uint32_t attr_from_type(int64_t token_type) {
  switch (token_type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

void read_tokens(const gguf::File& f, Vocab& v) {
  const gguf::Value* tokens = f.find(kTokensKey);
  if (!tokens) fail(std::string("missing ") + kTokensKey);
  if (!tokens->is_array() || tokens->elem_type != gguf::ValueType::STRING) fail(std::string(kTokensKey) + " is not a string array");
  const size_t n = tokens->strings.size();
  if (n == 0) fail(std::string(kTokensKey) + " is empty");
  if (n > static_cast<size_t>(INT32_MAX)) fail("vocabulary too large");
  const gguf::Value* scores = find_per_token_array(f, "tokenizer.ggml.scores", n);
  const gguf::Value* types = find_per_token_array(f, "tokenizer.ggml.token_type", n);
  if (scores && scores->floats.size() != n) fail("tokenizer.ggml.scores is not a float array");
  if (types && types->ints.size() != n) fail("tokenizer.ggml.token_type is not an integer array");

  v.text.resize(n);
  v.score.assign(n, 0.0f);
  v.attr.assign(n, kAttrNormal);
  v.id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string word = tokens->strings[i];
    if (word.empty()) word = "[EMPTY_" + std::to_string(i) + "]";  // keeps ids unique, as llama.cpp
    if (scores) v.score[i] = static_cast<float>(scores->floats[i]);
    if (types) v.attr[i] = attr_from_type(types->ints[i]);
    v.max_token_len = std::max(v.max_token_len, word.size());
    if (!v.id_of.emplace(word, static_cast<int32_t>(i)).second)
      fail("token " + std::to_string(i) + " '" + word + "' appears twice in " + kTokensKey);
    v.text[i] = std::move(word);
  }
}

void set_type_defaults(const gguf::File& f, Vocab& v) {
  switch (v.type) {
    case VocabType::kSpm:
      v.bos = 1; v.eos = 2; v.unk = 0;
      v.add_bos = true;
      v.add_space_prefix = true;
      break;
    case VocabType::kWpm:
      v.bos = 101; v.unk = 100; v.sep = 102; v.pad = 0; v.mask = 103;
      v.add_bos = true;
      v.add_sep = true;
      break;
    case VocabType::kBpe:
      v.bos = 11; v.eos = 11;  // llama.cpp's (Falcon-derived) fallback
      if (v.pre == "tekken" || v.pre == "chameleon") v.add_bos = true;
      if (v.pre == "glm4" || v.pre == "chatglm-bpe") v.bos = -1;
      break;
  }
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  v.add_sep = f.get_bool("tokenizer.ggml.add_sep_token", v.add_sep);
  if (v.type != VocabType::kWpm) v.add_sep = false;  // only WordPiece appends [SEP]
  v.normalize_lowercase = f.get_bool("tokenizer.ggml.normalizer.lowercase", true);
  v.strip_accents = f.get_bool("tokenizer.ggml.normalizer.strip_accents", v.normalize_lowercase);
}

// Ids from metadata replace the defaults; ids outside the vocabulary are
// ignored (llama.cpp warns and does the same), defaults outside it dropped.
void read_special_ids(const gguf::File& f, Vocab& v, int32_t* fim_pad, int32_t* fim_rep, int32_t* fim_sep) {
  const std::pair<const char*, int32_t*> keys[] = {
      {"bos_token_id", &v.bos},        {"eos_token_id", &v.eos},         {"eot_token_id", &v.eot},
      {"eom_token_id", &v.eom},        {"unknown_token_id", &v.unk},     {"seperator_token_id", &v.sep},
      {"padding_token_id", &v.pad},    {"mask_token_id", &v.mask},       {"fim_pad_token_id", fim_pad},
      {"fim_rep_token_id", fim_rep},   {"fim_sep_token_id", fim_sep},
  };
  for (auto [name, id] : keys) {
    if (!v.valid(*id)) *id = -1;
    const std::string key = std::string("tokenizer.ggml.") + name;
    const gguf::Value* val = f.find(key);
    if (!val) continue;
    if (!val->is_integer()) fail(key + " is not an integer");
    if (val->i >= 0 && val->i < static_cast<int64_t>(v.text.size())) *id = static_cast<int32_t>(val->i);
  }
}

bool in_list(const std::string& s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// The first token (lowest id) whose text is in `names`, marked as control.
int32_t find_by_name(Vocab& v, std::initializer_list<std::string_view> names) {
  for (int32_t id = 0; id < static_cast<int32_t>(v.text.size()); ++id) {
    if (in_list(v.text[id], names)) {
      v.attr[id] |= kAttrControl;
      return id;
    }
  }
  return -1;
}

// Which tokens end generation. GGUFs name only eos (and sometimes eot/eom), so
// like llama.cpp we also recognise the end-of-turn tokens of known chat formats
// by their text.
void detect_eog(Vocab& v, int32_t fim_pad, int32_t fim_rep, int32_t fim_sep) {
  if (v.eot < 0)
    v.eot = find_by_name(v, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                             "<end_of_utterance>"});
  if (v.eom < 0) v.eom = find_by_name(v, {"<|eom_id|>"});
  if (fim_pad < 0) fim_pad = find_by_name(v, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  if (fim_rep < 0)
    fim_rep = find_by_name(v, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  if (fim_sep < 0) fim_sep = find_by_name(v, {"<|file_sep|>"});

  for (int32_t id : {fim_pad, fim_rep, fim_sep, v.eos, v.eot, v.eom})
    if (id >= 0) v.eog.insert(id);
  for (int32_t id = 0; id < static_cast<int32_t>(v.text.size()); ++id) {
    if (in_list(v.text[id], {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                             "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                             "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                             "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["})) {
      v.eog.insert(id);
      v.attr[id] |= kAttrControl;
    }
  }
  // gpt-oss (and solar-open) end a message with <|end|> but keep generating
  // after it; their <|return|>/<|call|> are the real stops.
  const bool has = [&] {
    auto present = [&](const char* s) { int32_t id = v.find(s); return id >= 0 && v.eog.count(id); };
    return (present("<|return|>") && present("<|call|>")) || (present("<|calls|>") && present("<|flush|>"));
  }();
  if (int32_t end = v.find("<|end|>"); has && end >= 0 && v.eog.count(end)) {
    v.eog.erase(end);
    v.attr[end] = kAttrUserDefined;
  }
  // Gemma 4 uses </s> inside tool responses.
  if (int32_t s = v.find("</s>"), tr = v.find("<|tool_response>"); s >= 0 && tr >= 0 && v.eog.count(tr)) {
    v.eog.erase(s);
    v.attr[s] = kAttrNormal;
  }
  // gpt-oss channel markers must stay visible in the output.
  for (const char* name : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = v.find(name); id >= 0) v.attr[id] = kAttrUserDefined;
}

// Per-model strip flags that the GGUF does not carry (llama.cpp keys them on
// the model or pre-tokenizer name).
void apply_strip_rules(const gguf::File& f, Vocab& v) {
  std::string name = f.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string arch = f.architecture();
  auto contains = [](const std::string& s, std::initializer_list<std::string_view> subs) {
    for (auto sub : subs)
      if (s.find(sub) != std::string::npos) return true;
    return false;
  };
  if (contains(v.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) || contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    if (int32_t id = v.find("<mask>"); id >= 0) v.attr[id] |= kAttrLstrip;
  } else if (contains(name, {"phi-3", "phi3"})) {
    for (int32_t id : v.special_by_length) v.attr[id] |= kAttrRstrip;
    if (int32_t id = v.find("</s>"); id >= 0) v.attr[id] |= kAttrRstrip;
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
      if (int32_t id = v.find(t); id >= 0) v.attr[id] &= ~kAttrRstrip;
  } else if (contains(name, {"modern-bert"})) {
    if (int32_t id = v.find("[MASK]"); id >= 0) v.attr[id] |= kAttrLstrip;
  }
}

}  // namespace

Vocab load_vocab(const gguf::File& f, VocabType type) {
  Vocab v;
  v.type = type;
  v.model = f.get_string("tokenizer.ggml.model", "");
  v.pre = f.get_string("tokenizer.ggml.pre", "");
  read_tokens(f, v);
  set_type_defaults(f, v);
  int32_t fim_pad = -1, fim_rep = -1, fim_sep = -1;
  read_special_ids(f, v, &fim_pad, &fim_rep, &fim_sep);
  detect_eog(v, fim_pad, fim_rep, fim_sep);
  if (const gguf::Value* ids = f.find(kEogIdsKey); ids && ids->is_array())  // from HF generation_config.json
    for (int64_t id : ids->ints)
      if (id >= 0 && id < static_cast<int64_t>(v.text.size())) v.eog.insert(static_cast<int32_t>(id));

  for (int32_t id = 0; id < static_cast<int32_t>(v.text.size()); ++id)
    if (v.attr[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_by_length.push_back(id);
  std::stable_sort(v.special_by_length.begin(), v.special_by_length.end(),
                   [&](int32_t a, int32_t b) { return v.text[a].size() > v.text[b].size(); });
  apply_strip_rules(f, v);
  return v;
}

std::vector<Fragment> partition_special(const Vocab& v, std::string_view text, bool parse_special) {
  // Tokens are cut out longest first; each one takes its occurrences left to
  // right wherever the text is still raw. All occurrences are found in one pass
  // over the text (candidates bucketed by first byte), then claimed in order.
  struct Occurrence {
    size_t rank, pos;
  };
  std::vector<Occurrence> occ;
  {
    std::vector<std::vector<size_t>> by_byte(256);  // ranks into special_by_length
    for (size_t r = 0; r < v.special_by_length.size(); ++r) {
      const int32_t id = v.special_by_length[r];
      if (!parse_special && (v.attr[id] & (kAttrControl | kAttrUnknown))) continue;
      by_byte[static_cast<unsigned char>(v.text[id][0])].push_back(r);
    }
    for (size_t i = 0; i < text.size(); ++i) {
      for (size_t r : by_byte[static_cast<unsigned char>(text[i])]) {
        const std::string& t = v.text[v.special_by_length[r]];
        if (text.compare(i, t.size(), t) == 0) occ.push_back({r, i});
      }
    }
  }
  if (occ.empty()) {
    if (text.empty()) return {};
    return {Fragment{-1, text}};
  }
  std::sort(occ.begin(), occ.end(), [](const Occurrence& a, const Occurrence& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
  });

  // owner[i]: -1 raw, -2 whitespace dropped by an lstrip/rstrip token, else the
  // token that claimed byte i.
  std::vector<int32_t> owner(text.size(), -1);
  auto is_space = [&](size_t i) { return std::isspace(static_cast<unsigned char>(text[i])) != 0; };
  for (const Occurrence& o : occ) {
    const int32_t id = v.special_by_length[o.rank];
    const size_t len = v.text[id].size();
    bool free = true;
    for (size_t i = o.pos; i < o.pos + len && free; ++i) free = owner[i] == -1;
    if (!free) continue;
    for (size_t i = o.pos; i < o.pos + len; ++i) owner[i] = id;
    if (v.attr[id] & kAttrLstrip)
      for (size_t i = o.pos; i > 0 && owner[i - 1] == -1 && is_space(i - 1); --i) owner[i - 1] = -2;
    if (v.attr[id] & kAttrRstrip)
      for (size_t i = o.pos + len; i < text.size() && owner[i] == -1 && is_space(i); ++i) owner[i] = -2;
  }

  std::vector<Fragment> out;
  for (size_t i = 0; i < text.size();) {
    if (owner[i] == -1) {
      size_t j = i;
      while (j < text.size() && owner[j] == -1) ++j;
      out.push_back({-1, text.substr(i, j - i)});
      i = j;
    } else if (owner[i] == -2) {
      ++i;
    } else {
      out.push_back({owner[i], {}});
      i += v.text[owner[i]].size();
    }
  }
  return out;
}

}  // namespace spool
