// Quantization recipes for synth and plan: the table of --type names (uniform
// types, llama.cpp's file types with their per-tensor rules, the dynamic
// mixes), --tensor-type overrides, and the walk over a model's tensors in
// llama-quantize's order that applies them (rules in quant_mix_rules.cpp).
#include "synth/synth_quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <regex>

#include "core/error.h"
#include "synth/quant_mix_rules.h"

namespace spool {
namespace {

using namespace quant_mix;
using R = MixRule;

// Uniform K-quant types carry the llama.cpp "small" file type nearest to them.
// Llama-rule rows carry llama.cpp's default type for the file type (IQ2_S's is
// IQ2_XS, IQ2_M's IQ2_S, IQ3_XS's and IQ3_M's IQ3_S, as llama-quantize has it).
constexpr QuantRecipe kRecipes[] = {
    {"F32", DType::F32, kAllF32, R::Uniform, "every matrix F32"},
    {"F16", DType::F16, kF16, R::Uniform, "every matrix F16"},
    {"BF16", DType::BF16, kBF16, R::Uniform, "every matrix BF16"},
    {"Q4_0", DType::Q4_0, kQ4_0, R::Uniform, "every matrix Q4_0"},
    {"Q4_1", DType::Q4_1, kQ4_1, R::Uniform, "every matrix Q4_1"},
    {"Q5_0", DType::Q5_0, kQ5_0, R::Uniform, "every matrix Q5_0"},
    {"Q5_1", DType::Q5_1, kQ5_1, R::Uniform, "every matrix Q5_1"},
    {"Q8_0", DType::Q8_0, kQ8_0, R::Uniform, "every matrix Q8_0"},
    {"Q2_K", DType::Q2_K, kQ2_K, R::Uniform, "every matrix Q2_K"},
    {"Q3_K", DType::Q3_K, kQ3_K_S, R::Uniform, "every matrix Q3_K"},
    {"Q4_K", DType::Q4_K, kQ4_K_S, R::Uniform, "every matrix Q4_K"},
    {"Q5_K", DType::Q5_K, kQ5_K_S, R::Uniform, "every matrix Q5_K"},
    {"Q6_K", DType::Q6_K, kQ6_K, R::Uniform, "every matrix Q6_K"},
    {"MXFP4", DType::MXFP4, kMXFP4_MOE, R::Uniform, "every matrix MXFP4"},
    {"Q4_K_M", DType::Q4_K, kQ4_K_M, R::Llama, "llama.cpp's Q4_K_M: Q4_K, output and some attn_v / ffn_down Q6_K"},
    {"IQ1_S", DType::IQ1_S, kIQ1_S, R::Llama, "llama.cpp's IQ1_S: IQ1_S, attn_output IQ2_XXS, output Q5_K, token_embd Q2_K"},
    {"IQ1_M", DType::IQ1_M, kIQ1_M, R::Llama, "llama.cpp's IQ1_M: IQ1_M, attn_output IQ2_XXS, output Q5_K, token_embd Q2_K"},
    {"IQ2_XXS", DType::IQ2_XXS, kIQ2_XXS, R::Llama, "llama.cpp's IQ2_XXS: IQ2_XXS, output Q5_K, token_embd Q2_K"},
    {"IQ2_XS", DType::IQ2_XS, kIQ2_XS, R::Llama, "llama.cpp's IQ2_XS: IQ2_XS, output Q5_K, token_embd Q2_K"},
    {"IQ2_S", DType::IQ2_XS, kIQ2_S, R::Llama, "llama.cpp's IQ2_S: IQ2_XS, some IQ3_S, output Q5_K"},
    {"IQ2_M", DType::IQ2_S, kIQ2_M, R::Llama, "llama.cpp's IQ2_M: IQ2_S, some IQ3_S, output Q5_K"},
    {"IQ3_XXS", DType::IQ3_XXS, kIQ3_XXS, R::Llama, "llama.cpp's IQ3_XXS: IQ3_XXS, attn_q/k IQ2_S, attn_output IQ3_S"},
    {"IQ3_XS", DType::IQ3_S, kIQ3_XS, R::Llama, "llama.cpp's IQ3_XS: IQ3_S, middle FFN gate/up and attn_q/k IQ3_XXS"},
    {"IQ3_S", DType::IQ3_S, kIQ3_S, R::Llama, "llama.cpp's IQ3_S: IQ3_S, output Q6_K"},
    {"IQ3_M", DType::IQ3_S, kIQ3_M, R::Llama, "llama.cpp's IQ3_M: IQ3_S, attn_v / attn_output / first ffn_down Q4_K"},
    {"IQ4_NL", DType::IQ4_NL, kIQ4_NL, R::Llama, "llama.cpp's IQ4_NL: IQ4_NL, output Q6_K"},
    {"IQ4_XS", DType::IQ4_XS, kIQ4_XS, R::Llama, "llama.cpp's IQ4_XS: IQ4_XS, output Q6_K"},
    {"TQ1_0", DType::TQ1_0, kTQ1_0, R::Llama, "llama.cpp's TQ1_0: TQ1_0, output Q6_K, token_embd Q4_K"},
    {"TQ2_0", DType::TQ2_0, kTQ2_0, R::Llama, "llama.cpp's TQ2_0: TQ2_0, output Q6_K, token_embd Q4_K"},
    {"Q1_0", DType::Q1_0, kQ1_0, R::Llama, "llama.cpp's Q1_0: Q1_0, output Q6_K"},
    {"Q2_0", DType::Q2_0, kQ2_0, R::Llama, "llama.cpp's Q2_0: Q2_0, output Q6_K, token_embd Q4_K"},
    // The dynamic 1-2-bit MoE mixes (the published "UD" files' shape): file type of their expert type.
    {"UD-IQ1_S", DType::IQ1_S, kIQ1_S, R::Dynamic,
     "dynamic 1.8-bit: routed experts gate/up IQ1_S, down IQ2_XXS; attention, shared experts, dense FFN Q4_K "
     "(their ffn_down Q6_K); token_embd Q4_K, output Q6_K"},
    {"UD-IQ1_M", DType::IQ1_M, kIQ1_M, R::Dynamic,
     "dynamic 1.9-bit: routed experts gate/up IQ1_M, down IQ2_XXS; the rest as UD-IQ1_S"},
    {"UD-IQ2_XXS", DType::IQ2_XXS, kIQ2_XXS, R::Dynamic,
     "dynamic 2.2-bit: routed experts gate/up IQ2_XXS, down Q2_K; the rest as UD-IQ1_S"},
};

bool same_ignore_case(const std::string& a, const char* b) {
  size_t i = 0;
  for (; i < a.size() && b[i]; ++i)
    if (std::toupper((unsigned char)a[i]) != std::toupper((unsigned char)b[i])) return false;
  return i == a.size() && !b[i];
}

int layer_of(const std::string& name) {
  int layer = -1;
  return std::sscanf(name.c_str(), "blk.%d.", &layer) == 1 ? layer : -1;
}

DType rule_type(const QuantRecipe& r, const MixModel& m, const std::string& name, int64_t row_length, Counters& c) {
  switch (r.rule) {
    case MixRule::Uniform: return r.base;
    case MixRule::Llama: return llama_rule(r, m, name, row_length, c);
    case MixRule::Dynamic: return dynamic_rule(r, name);
  }
  return r.base;
}

}  // namespace

const QuantRecipe* find_quant_recipe(const std::string& name) {
  for (const QuantRecipe& r : kRecipes)
    if (same_ignore_case(name, r.name)) return &r;
  return nullptr;
}

std::vector<std::string> quant_recipe_names() {
  std::vector<std::string> out;
  for (const QuantRecipe& r : kRecipes) out.push_back(r.name);
  return out;
}

std::vector<const QuantRecipe*> quant_recipes() {
  std::vector<const QuantRecipe*> out;
  for (const QuantRecipe& r : kRecipes) out.push_back(&r);
  return out;
}

TypeOverride parse_type_override(const std::string& spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw Error("--tensor-type '" + spec + "': expected PATTERN=TYPE, e.g. ffn_down_exps=IQ2_XXS");
  TypeOverride o;
  o.pattern = spec.substr(0, eq);
  std::transform(o.pattern.begin(), o.pattern.end(), o.pattern.begin(), [](unsigned char ch) { return std::tolower(ch); });
  const std::string type = spec.substr(eq + 1);
  const std::optional<DType> t = dtype_from_name(type);
  if (!t || !find_dtype_traits((uint32_t)*t))
    throw Error("--tensor-type '" + spec + "': unknown tensor type '" + type + "'");
  o.type = *t;
  try {
    std::regex check(o.pattern);
  } catch (const std::regex_error& e) {
    throw Error("--tensor-type '" + spec + "': bad regular expression (" + e.what() + ")");
  }
  return o;
}

std::vector<DType> mix_types(const QuantRecipe& recipe, const MixModel& model, const std::vector<MixTensor>& tensors,
                             const MixOptions& options) {
  std::vector<std::regex> patterns;
  for (const TypeOverride& o : options.overrides) patterns.emplace_back(o.pattern);
  // llama-quantize walks its tensors by layer, then by name; its counters follow that order.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> layer(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) layer[i] = layer_of(tensors[i].name);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return layer[a] != layer[b] ? layer[a] < layer[b] : tensors[a].name < tensors[b].name;
  });
  Counters c;
  c.n_ffn_down = c.n_ffn_gate = c.n_ffn_up = model.n_layer;
  for (const MixTensor& t : tensors) {
    const Category cat = category_of(t.name);
    if (is_attn_v_like(cat)) ++c.n_attention_wv;
    if (cat == Category::Output) c.tied_embeddings = false;
  }
  std::vector<DType> out(tensors.size(), DType::F32);
  for (size_t i : order) {
    const MixTensor& t = tensors[i];
    if (!t.quantize || t.shape.size() < 2) continue;
    const QuantRecipe& r = t.recipe ? *t.recipe : recipe;
    DType want = r.base;
    bool manual = false;
    for (size_t k = 0; k < patterns.size() && !manual; ++k)
      if (std::regex_search(t.name, patterns[k])) want = options.overrides[k].type, manual = true;
    if (!manual && !options.pure) want = rule_type(r, model, t.name, t.shape[0], c);
    out[i] = fallback(want, t.shape[0]);
  }
  return out;
}

DType tensor_dtype(const QuantRecipe& recipe, const TensorRole& t) {
  if (t.n_dims < 2) return DType::F32;
  MixModel m;
  m.n_layer = t.n_layer;
  Counters c;  // a dense model: one attn_v and one ffn_down per layer, so the counters are the layer index
  c.n_attention_wv = c.n_ffn_down = c.n_ffn_gate = c.n_ffn_up = t.n_layer;
  c.i_attention_wv = c.i_ffn_down = c.i_ffn_gate = c.i_ffn_up = std::max(t.layer, 0);
  c.tied_embeddings = t.tied_embeddings;
  return fallback(rule_type(recipe, m, t.name, t.row_length, c), t.row_length);
}

const char* file_type_name(int file_type) {
  switch (file_type) {
    case kAllF32: return "all F32";
    case kF16: return "F16";
    case kBF16: return "BF16";
    case kQ4_0: return "Q4_0";
    case kQ4_1: return "Q4_1";
    case kQ5_0: return "Q5_0";
    case kQ5_1: return "Q5_1";
    case kQ8_0: return "Q8_0";
    case kQ2_K: return "Q2_K - Medium";
    case kQ2_K_S: return "Q2_K - Small";
    case kQ3_K_S: return "Q3_K - Small";
    case kQ3_K_M: return "Q3_K - Medium";
    case kQ3_K_L: return "Q3_K - Large";
    case kQ4_K_S: return "Q4_K - Small";
    case kQ4_K_M: return "Q4_K - Medium";
    case kQ5_K_S: return "Q5_K - Small";
    case kQ5_K_M: return "Q5_K - Medium";
    case kQ6_K: return "Q6_K";
    case kIQ2_XXS: return "IQ2_XXS - 2.0625 bpw";
    case kIQ2_XS: return "IQ2_XS - 2.3125 bpw";
    case kIQ2_S: return "IQ2_S - 2.5 bpw";
    case kIQ2_M: return "IQ2_M - 2.7 bpw";
    case kIQ3_XS: return "IQ3_XS - 3.3 bpw";
    case kIQ3_XXS: return "IQ3_XXS - 3.0625 bpw";
    case kIQ1_S: return "IQ1_S - 1.5625 bpw";
    case kIQ1_M: return "IQ1_M - 1.75 bpw";
    case kIQ4_NL: return "IQ4_NL - 4.5 bpw";
    case kIQ4_XS: return "IQ4_XS - 4.25 bpw";
    case kIQ3_S: return "IQ3_S - 3.4375 bpw";
    case kIQ3_M: return "IQ3_S mix - 3.66 bpw";
    case kTQ1_0: return "TQ1_0 - 1.69 bpw ternary";
    case kTQ2_0: return "TQ2_0 - 2.06 bpw ternary";
    case kMXFP4_MOE: return "MXFP4 MoE";
    case kNVFP4: return "NVFP4";
    case kQ1_0: return "Q1_0";
    case kQ2_0: return "Q2_0";
    default: return "?";
  }
}

}  // namespace spool
