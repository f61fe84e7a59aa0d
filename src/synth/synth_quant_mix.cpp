// Quantization recipes for synth. The Q4_K_M rules follow what llama.cpp's
// quantizer does for a dense llama-family model without experts: output (or
// tied token_embd) in Q6_K, attn_v and ffn_down in Q6_K on the "more bits"
// layers (first and last eighth, and every third in between), Q4_K elsewhere.
// The same rules give a deepseek2 file's non-expert tensors their types.
#include "synth/synth_quant_mix.h"

#include <cctype>

namespace spool {
namespace {

// llama.cpp's LLAMA_FTYPE_* ids.
enum FileType {
  kAllF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10,
  kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16, kQ5_K_M = 17,
  kQ6_K = 18, kIQ2_XXS = 19, kIQ2_XS = 20, kIQ3_XXS = 23, kIQ1_S = 24, kIQ4_NL = 25, kIQ3_S = 26, kIQ2_S = 28,
  kIQ4_XS = 30, kIQ1_M = 31, kBF16 = 32, kTQ1_0 = 36, kTQ2_0 = 37, kMXFP4_MOE = 38, kQ1_0 = 40, kQ2_0 = 41,
};

// Uniform K-quant types carry the llama.cpp "small" file type nearest to them.
constexpr QuantRecipe kRecipes[] = {
    {"F32", DType::F32, kAllF32, false},   {"F16", DType::F16, kF16, false},
    {"BF16", DType::BF16, kBF16, false},   {"Q4_0", DType::Q4_0, kQ4_0, false},
    {"Q4_1", DType::Q4_1, kQ4_1, false},   {"Q5_0", DType::Q5_0, kQ5_0, false},
    {"Q5_1", DType::Q5_1, kQ5_1, false},   {"Q8_0", DType::Q8_0, kQ8_0, false},
    {"Q2_K", DType::Q2_K, kQ2_K, false},   {"Q3_K", DType::Q3_K, kQ3_K_S, false},
    {"Q4_K", DType::Q4_K, kQ4_K_S, false}, {"Q5_K", DType::Q5_K, kQ5_K_S, false},
    {"Q6_K", DType::Q6_K, kQ6_K, false},   {"Q4_K_M", DType::Q4_K, kQ4_K_M, true},
    {"MXFP4", DType::MXFP4, kMXFP4_MOE, false},
    // The low-bit types, uniform (every matrix in the type; llama.cpp's own
    // mixes of them keep some tensors wider: not reproduced yet).
    {"IQ2_XXS", DType::IQ2_XXS, kIQ2_XXS, false}, {"IQ2_XS", DType::IQ2_XS, kIQ2_XS, false},
    {"IQ2_S", DType::IQ2_S, kIQ2_S, false},       {"IQ3_XXS", DType::IQ3_XXS, kIQ3_XXS, false},
    {"IQ3_S", DType::IQ3_S, kIQ3_S, false},       {"IQ1_S", DType::IQ1_S, kIQ1_S, false},
    {"IQ1_M", DType::IQ1_M, kIQ1_M, false},       {"IQ4_NL", DType::IQ4_NL, kIQ4_NL, false},
    {"IQ4_XS", DType::IQ4_XS, kIQ4_XS, false},    {"TQ1_0", DType::TQ1_0, kTQ1_0, false},
    {"TQ2_0", DType::TQ2_0, kTQ2_0, false},       {"Q1_0", DType::Q1_0, kQ1_0, false},
    {"Q2_0", DType::Q2_0, kQ2_0, false},
};

bool same_ignore_case(const std::string& a, const char* b) {
  size_t i = 0;
  for (; i < a.size() && b[i]; ++i)
    if (std::toupper((unsigned char)a[i]) != std::toupper((unsigned char)b[i])) return false;
  return i == a.size() && !b[i];
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// llama.cpp's use_more_bits(): the first and last eighth of the layers, and
// every third layer in between, get the larger type.
bool use_more_bits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

DType fallback(DType t, int64_t row_length) {
  if (row_length % dtype_traits(t).block_size == 0) return t;
  DType f;
  switch (t) {
    case DType::Q2_K: case DType::Q3_K: f = DType::Q4_0; break;
    case DType::Q4_K: f = DType::Q5_0; break;
    case DType::Q5_K: f = DType::Q5_1; break;
    case DType::Q6_K: f = DType::Q8_0; break;
    // llama.cpp's fallbacks for rows that are no multiple of 256.
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S: case DType::IQ1_M: case DType::IQ4_XS: f = DType::IQ4_NL; break;
    case DType::TQ1_0: case DType::TQ2_0: case DType::Q2_0: f = DType::Q4_0; break;  // Q1_0: F16 (llama.cpp has none)
    default: f = DType::F16; break;
  }
  return row_length % dtype_traits(f).block_size == 0 ? f : DType::F16;
}

DType k_medium_type(const TensorRole& t) {
  const bool is_output = t.name == "output.weight" || (t.tied_embeddings && t.name == "token_embd.weight");
  if (is_output) return t.row_length % 256 == 0 ? DType::Q6_K : DType::Q8_0;
  // llama.cpp's ffn_down category is a substring match: shared and stacked expert down projections too.
  if (t.layer >= 0 && (ends_with(t.name, ".attn_v.weight") || t.name.find(".ffn_down") != std::string::npos))
    return use_more_bits(t.layer, t.n_layer) ? DType::Q6_K : DType::Q4_K;
  return DType::Q4_K;
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

DType tensor_dtype(const QuantRecipe& recipe, const TensorRole& t) {
  if (t.n_dims < 2) return DType::F32;
  const DType want = recipe.k_medium_mix ? k_medium_type(t) : recipe.base;
  return fallback(want, t.row_length);
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
    case kQ3_K_S: return "Q3_K - Small";
    case kQ3_K_M: return "Q3_K - Medium";
    case kQ3_K_L: return "Q3_K - Large";
    case kQ4_K_S: return "Q4_K - Small";
    case kQ4_K_M: return "Q4_K - Medium";
    case kQ5_K_S: return "Q5_K - Small";
    case kQ5_K_M: return "Q5_K - Medium";
    case kQ6_K: return "Q6_K";
    case kMXFP4_MOE: return "MXFP4 MoE";
    default: return "?";
  }
}

}  // namespace spool
