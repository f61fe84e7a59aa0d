// Hugging Face Gated DeltaNet hybrids (qwen3_next, qwen3_5_moe text part) ->
// llama.cpp's GGUF architectures qwen3next / qwen35moe: metadata keys
// (ssm.*, the recurrent-layer pattern, the shared expert's width), tensor
// names, and the value transforms llama.cpp's converter applies (A = -exp(A_log),
// zero-centred RMSNorm weights stored as 1 + w, the conv kernel squeezed).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "format/gguf.h"
#include "format/gguf_export.h"

namespace spool::hf {

// spool's own key: 1 when value heads are grouped by key head (HF order, and
// llama.cpp's qwen3next), 0 when tiled (llama.cpp's qwen35moe converter
// reorders them). Absent: the architecture's GGUF default.
inline constexpr const char* kGdnVHeadsGroupedKey = "spool.ssm.v_heads_grouped";

// model_type -> "qwen3next" / "qwen35moe", nullptr for other types.
const char* gdn_gguf_arch(const std::string& model_type);
// The ssm.* keys, recurrent layers and shared-expert width under prefix `a` ("qwen3next.").
void gdn_config_to_metadata(const nlohmann::json& config, const std::string& a, gguf::File& out);
// GGUF name of a layer tensor (name after "model.layers.N."), "" when not a GDN-family tensor.
std::string gdn_tensor_name(const std::string& layer_name, const std::string& blk);
// Applies the converter's value transforms to the manifest read from `out`'s files.
void gdn_fix_tensors(gguf::File& out);
// For GGUF export: from the layout above (fused ssm_in, grouped value heads) to
// what llama.cpp's converter writes today: attn_qkv + attn_gate, post_attention_norm,
// full_attention_interval, and for qwen35moe tiled value heads and rope sections.
void gdn_to_llama_layout(gguf::File& meta, std::vector<ExportTensor>& tensors);

}  // namespace spool::hf
