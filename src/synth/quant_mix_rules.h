// The per-tensor rules behind mix_types (synth_quant_mix.h): llama.cpp's
// choices for one tensor under a file type (what its llama_tensor_get_type
// does, re-derived: tensor categories by name, use_more_bits, the running
// attn_v / ffn_down counters), the dynamic mixes' choices per tensor class,
// and the row-length fallbacks.
#pragma once

#include <string>

#include "synth/synth_quant_mix.h"

namespace spool::quant_mix {

// llama.cpp's LLAMA_FTYPE_* ids.
enum FileType {
  kAllF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10,
  kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16, kQ5_K_M = 17,
  kQ6_K = 18, kIQ2_XXS = 19, kIQ2_XS = 20, kQ2_K_S = 21, kIQ3_XS = 22, kIQ3_XXS = 23, kIQ1_S = 24, kIQ4_NL = 25,
  kIQ3_S = 26, kIQ3_M = 27, kIQ2_S = 28, kIQ2_M = 29, kIQ4_XS = 30, kIQ1_M = 31, kBF16 = 32, kTQ1_0 = 36,
  kTQ2_0 = 37, kMXFP4_MOE = 38, kNVFP4 = 39, kQ1_0 = 40, kQ2_0 = 41,
};

// The categories llama.cpp's quantizer sorts tensors into (substring matches on the name).
enum class Category { TokenEmbd, AttnQ, AttnV, AttnK, AttnQkv, AttnKvB, AttnOutput, FfnUp, FfnGate, FfnDown, Output, Other };
Category category_of(const std::string& name);
inline bool is_attn_v_like(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

// llama.cpp's running state while it walks the tensors (by layer, then name).
struct Counters {
  int n_attention_wv = 0, i_attention_wv = 0;
  int n_ffn_down = 0, i_ffn_down = 0;
  int n_ffn_gate = 0, i_ffn_gate = 0;
  int n_ffn_up = 0, i_ffn_up = 0;
  bool tied_embeddings = true;  // until an output.weight is seen
};

// The type llama.cpp picks for one quantized tensor under recipe.file_type,
// before the row-length fallback; advances the counters as it does.
DType llama_rule(const QuantRecipe& recipe, const MixModel& model, const std::string& name, int64_t row_length,
                 Counters& c);

// A dynamic mix's type for one tensor, by tensor class (format/tensor_class.h):
// routed expert gate/up recipe.base and down one step wider (dynamic_down_type),
// attention, shared-expert and dense-FFN gate/up and other matrices Q4_K, their
// down projections Q6_K, token_embd Q4_K, output Q6_K.
DType dynamic_rule(const QuantRecipe& recipe, const std::string& name);
DType dynamic_down_type(DType expert_type);

// llama.cpp's fallback when row_length is no multiple of t's block size.
DType fallback(DType t, int64_t row_length);

}  // namespace spool::quant_mix
