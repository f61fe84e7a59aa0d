// Shape of a Gated DeltaNet hybrid (GGUF qwen3next / qwen35moe) from its
// metadata: head counts and sizes of the linear-attention layers (llama.cpp's
// ssm.* keys), which layers are linear, and the per-sequence recurrent state
// they need. Used by the model (gdn_model.h) and by tools that only read
// headers (`spool inspect`).
#pragma once

#include <string>

#include "format/gguf.h"
#include "model/config.h"

namespace spool {

struct GdnShape {
  int dk = 0, dv = 0;     // key / value head dims (ssm.state_size, inner_size / time_step_rank)
  int n_k = 0, n_v = 0;   // key heads (ssm.group_count), value heads (ssm.time_step_rank)
  int conv_k = 0;         // conv kernel (ssm.conv_kernel)
  bool v_grouped = true;  // value head j uses key head j / (n_v / n_k) (else j % n_k: llama.cpp's qwen35moe)
  int key_dim() const { return n_k * dk; }
  int value_dim() const { return n_v * dv; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
  int k_head_of(int v_head) const { return v_grouped ? v_head / (n_v / n_k) : v_head % n_k; }
};

// True for the architectures read_gdn_shape applies to.
bool is_gdn_arch(const std::string& arch);

// Reads the ssm.* keys and fills c.layer_recurrent and c.recurrent (conv
// history and delta-rule matrices per linear layer). v_grouped_default: the
// value-head order of this architecture's GGUF files. Throws spool::Error on
// missing or inconsistent keys.
GdnShape read_gdn_shape(const gguf::File& f, ModelConfig& c, bool v_grouped_default);

// Bytes the linear-attention layers of a Gated DeltaNet model (gdn_model.cpp)
// add to scratch_bytes_estimate for passes of n_tokens tokens: their per-token
// buffers (projections, conv rows, gates, outputs, the shared expert's rows,
// the gated attention's q + gate) and the chunked delta rule's per-thread
// scratch (up to 64 threads). 0 for other architectures.
uint64_t gdn_scratch_bytes(const gguf::File& f, const ModelConfig& c, int n_tokens);

}  // namespace spool
