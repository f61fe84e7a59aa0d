// The split-regex sequences behind each tokenizer.ggml.pre name, and the
// splitting itself. Patterns are the ones the models' tokenizer.json files
// declare (Hugging Face Split pre-tokenizers, behaviour "Isolated"); names that
// llama.cpp treats alike share an entry so GGUFs from its converter load here.
#include "text/pretokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "text/unicode_util.h"

namespace spool {

namespace {

// GPT-2's word pattern: contractions, optional-space letter/number/other runs,
// then whitespace (a run keeps its last space for the next word).
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
// Llama-3 / tiktoken cl100k: case-insensitive contractions, digits in groups of three.
constexpr const char* kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Qwen2: as Llama-3 but every digit is its own word.
constexpr const char* kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen35 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kCjk = R"re([一-龥ࠀ-一가-퟿]+)re";
constexpr const char* kPoro = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

struct PreSpec {
  std::vector<std::string_view> names;
  std::vector<const char*> patterns;
};

const std::vector<PreSpec>& specs() {
  static const std::vector<PreSpec> table = {
      // No pre key (old GGUFs) or "default": punctuation runs and digit runs
      // are isolated before the GPT-2 pattern, digits then cut in threes.
      {{"", "default"}, {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano", "dbrx", "smaug-bpe", "chatglm-bpe", "glm4"},
       {kLlama3}},
      {{"deepseek-llm"},
       {R"re([\r\n])re", R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)re",
        R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re", R"re(\s+$)re", kCjk, R"re(\p{N}+)re"}},
      {{"deepseek-coder"},
       {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjk, R"re(\p{N})re"}},
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm"},
       {R"re(\p{N}{1,3})re", R"re([一-龥぀-ゟ゠-ヿ]+)re",
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {{"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"re(\p{N})re", kGpt2}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
        "granite-docling", "exaone4"},
       {kGpt2}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open", "grok-2"},
       {kQwen2}},
      {{"qwen35"}, {kQwen35}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kPoro}},
      {{"viking"}, {kPoro, R"re(\p{N})re"}},
      {{"tekken"}, {kTekken}},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}},
      {{"seed-coder"},
       {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      // The original uses possessive quantifiers; greedy ones split the same
      // text identically here because the classes they follow are disjoint.
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       {R"re('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re"}},
      {{"minicpm5"},
       {R"re(\p{N}{1,3})re",
        R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
  };
  return table;
}

}  // namespace

PreTokenizer::PreTokenizer(const std::string& name) : name_(name) {
  for (const auto& spec : specs()) {
    if (std::find(spec.names.begin(), spec.names.end(), name) == spec.names.end()) continue;
    for (const char* p : spec.patterns) regexes_.emplace_back(p);
    return;
  }
  throw Error("unsupported pre-tokenizer '" + name + "' (tokenizer.ggml.pre)");
}

std::vector<std::string> PreTokenizer::known_names() {
  std::vector<std::string> out;
  for (const auto& spec : specs())
    for (auto n : spec.names)
      if (!n.empty()) out.emplace_back(n);
  return out;
}

std::string PreTokenizer::name_for_patterns(const std::vector<std::string>& patterns) {
  for (const auto& spec : specs()) {
    if (spec.names.empty() || spec.patterns.size() != patterns.size()) continue;
    if (!std::equal(patterns.begin(), patterns.end(), spec.patterns.begin())) continue;
    for (auto n : spec.names)
      if (!n.empty()) return std::string(n);
  }
  return "";
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cpts = unicode::decode_utf8(text);
  // Pieces as [start, end) codepoint ranges; each regex refines all of them.
  std::vector<std::pair<size_t, size_t>> pieces;
  if (!cpts.empty()) pieces.emplace_back(0, cpts.size());
  std::vector<std::pair<size_t, size_t>> next;
  for (const UnicodeRegex& re : regexes_) {
    next.clear();
    for (auto [begin, end] : pieces) {
      size_t gap = begin;  // start of text not yet covered by a match
      for (size_t pos = begin; pos < end;) {
        size_t match_end = 0;
        if (re.match_at(cpts.data(), begin, end, pos, &match_end) && match_end > pos) {
          if (pos > gap) next.emplace_back(gap, pos);
          next.emplace_back(pos, match_end);
          pos = gap = match_end;
        } else {
          ++pos;
        }
      }
      if (gap < end) next.emplace_back(gap, end);
    }
    pieces.swap(next);
  }
  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (auto [begin, end] : pieces) {
    std::string w;
    for (size_t i = begin; i < end; ++i) unicode::append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace spool
