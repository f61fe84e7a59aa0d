// Which dtype each tensor of a synthetic model gets for a requested --type:
// uniform types; llama.cpp's file types with their per-tensor rules
// (Q4_K_M, the IQ1/IQ2/IQ3/IQ4, TQ and Q1_0/Q2_0 families, re-derived from
// what its llama_tensor_get_type does: quant_mix_rules.h); named "dynamic"
// mixes in the style of the published 1-2-bit MoE files (UD-IQ1_S, ...);
// llama-quantize's --tensor-type PATTERN=TYPE overrides and --pure; and
// llama.cpp's general.file_type ids and names so its tools label our files.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"

namespace spool {

// How a recipe picks a tensor's type.
enum class MixRule {
  Uniform,  // every matrix `base` (rows that cannot hold it fall back as llama.cpp does)
  Llama,    // llama.cpp's per-tensor rules for file type `file_type`, default type `base`
  Dynamic,  // a per-class dynamic mix (quant_mix_rules.h: routed experts low-bit, the rest 4-6 bit)
};

struct QuantRecipe {
  const char* name;   // what --type accepts: "Q4_0", "Q4_K_M", "IQ2_M", "UD-IQ1_S", ...
  DType base;         // type of most 2-D weights (llama.cpp's default type for the file type)
  int file_type;      // llama.cpp's LLAMA_FTYPE_* id written as general.file_type
  MixRule rule;
  const char* words;  // one line for --help and plans
};

// nullptr for an unknown name (case-insensitive).
const QuantRecipe* find_quant_recipe(const std::string& name);
std::vector<std::string> quant_recipe_names();
std::vector<const QuantRecipe*> quant_recipes();

// What the rules need to know about the whole model.
struct MixModel {
  int n_layer = 0;
  int n_expert = 0;          // routed experts per MoE layer (0: dense)
  int n_gqa = 1;             // n_head / n_head_kv (deepseek2 MLA files say head_count_kv 1)
  bool has_imatrix = true;   // as the published low-bit files are made; llama-quantize refuses IQ1/IQ2 without one
};

// One tensor of the model, in the writer's order.
struct MixTensor {
  std::string name;
  std::vector<int64_t> shape;            // GGUF order: shape[0] is the row length
  bool quantize = true;                  // false: stays F32 (norms, routers, conv, biases; the writer decides)
  const QuantRecipe* recipe = nullptr;   // this tensor's own recipe (nullptr: the file's)
};

// llama-quantize's --tensor-type PATTERN=TYPE: the first pattern found
// (std::regex_search, ECMAScript, on the lower-cased pattern as llama-quantize
// does) anywhere in a tensor's name sets its type, before any mix rule.
struct TypeOverride {
  std::string pattern;
  DType type;
};
// Parses "PATTERN=TYPE"; throws spool::Error naming what is wrong.
TypeOverride parse_type_override(const std::string& spec);

struct MixOptions {
  std::vector<TypeOverride> overrides;
  bool pure = false;  // llama-quantize --pure: every quantized matrix the recipe's base type
};

// The dtype of every tensor (same order as `tensors`), as llama-quantize
// would assign them: the tensors are visited in its order (by layer, then
// name) so its running counters (attn_v and ffn_down indices) match; then
// overrides, the recipe's rule, and the row-length fallbacks. Throws
// spool::Error on a bad override pattern.
std::vector<DType> mix_types(const QuantRecipe& recipe, const MixModel& model, const std::vector<MixTensor>& tensors,
                             const MixOptions& options = {});

// One tensor of a dense llama-family model on its own (the layer index stands
// in for llama.cpp's counters, as it does for such models).
struct TensorRole {
  std::string name;      // GGUF tensor name, e.g. "blk.3.attn_v.weight"
  int64_t row_length;    // shape[0]
  int n_dims;
  int layer = -1;        // block index for blk.N.* tensors
  int n_layer = 0;
  bool tied_embeddings = false;  // token_embd doubles as the output matrix
};
// 1-D tensors (norms, biases) are F32. Row lengths a type cannot hold fall
// back the way llama.cpp does (Q4_K -> Q5_0, Q6_K -> Q8_0, IQ* -> IQ4_NL, ...).
DType tensor_dtype(const QuantRecipe& recipe, const TensorRole& t);

// llama.cpp's name for a general.file_type value ("Q4_K - Medium"); "?" if unknown.
const char* file_type_name(int file_type);

}  // namespace spool
