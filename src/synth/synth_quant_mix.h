// Which dtype each tensor of a synthetic model gets for a requested --type:
// uniform types, and llama.cpp's Q4_K_M mix (its llama_tensor_get_type rules
// for dense llama-family models, re-derived here), plus llama.cpp's
// general.file_type ids and names so its tools label our files correctly.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"

namespace spool {

struct QuantRecipe {
  const char* name;   // what --type accepts: "Q4_0", "Q4_K_M", ...
  DType base;         // type of most 2-D weights
  int file_type;      // llama.cpp's LLAMA_FTYPE_* id written as general.file_type
  bool k_medium_mix;  // llama.cpp's Q4_K_M rules (Q6_K for output, some attn_v/ffn_down)
};

// nullptr for an unknown name (case-insensitive).
const QuantRecipe* find_quant_recipe(const std::string& name);
std::vector<std::string> quant_recipe_names();

// What the mix rules need to know about one tensor.
struct TensorRole {
  std::string name;      // GGUF tensor name, e.g. "blk.3.attn_v.weight"
  int64_t row_length;    // shape[0]
  int n_dims;
  int layer = -1;        // block index for blk.N.* tensors
  int n_layer = 0;
  bool tied_embeddings = false;  // token_embd doubles as the output matrix
};

// The dtype of one tensor under a recipe. 1-D tensors (norms, biases) are F32.
// Row lengths a type cannot hold fall back the way llama.cpp does
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, else F16).
DType tensor_dtype(const QuantRecipe& recipe, const TensorRole& t);

// llama.cpp's name for a general.file_type value ("Q4_K - Medium"); "?" if unknown.
const char* file_type_name(int file_type);

}  // namespace spool
