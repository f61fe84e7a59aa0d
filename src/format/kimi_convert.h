// A Hugging Face kimi_linear checkpoint in llama.cpp's kimi-linear GGUF layout,
// for `spool convert` (format/gguf_export.h writes it): the MLA up-projection
// split into attn_k_b (transposed per head) and attn_v_b, ssm_a = -exp(A_log),
// 4-D conv weights, leading_dense_block_count. Per-layer head_count_kv (0 on
// KDA layers) and the other keys come from hf_config_kimi.cpp already. F32 only.
#pragma once

#include <vector>

#include "format/gguf.h"
#include "format/gguf_export.h"

namespace spool {

// No-op for other architectures. Throws spool::Error when the checkpoint cannot
// be expressed (dense feed-forwards that are not the leading layers, non-F32 tensors).
void kimi_to_llama_layout(gguf::File& meta, std::vector<ExportTensor>& tensors);

}  // namespace spool
