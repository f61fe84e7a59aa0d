// A Hugging Face kimi_linear checkpoint written as a GGUF in llama.cpp's
// kimi-linear layout (what its convert_hf_to_gguf.py writes): stacked expert
// tensors, the MLA up-projection split into attn_k_b (transposed per head) and
// attn_v_b, ssm_a = -exp(A_log), 4-D conv weights, per-layer head_count_kv with
// 0 on KDA layers, leading_dense_block_count, and the tokenizer keys. F32 only.
#pragma once

#include <string>

namespace spool {

// Throws spool::Error when the checkpoint is not kimi_linear or cannot be expressed
// (dense feed-forwards that are not the leading layers).
void write_kimi_linear_gguf(const std::string& hf_dir, const std::string& out_path);

}  // namespace spool
