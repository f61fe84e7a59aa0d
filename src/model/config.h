// Hyper-parameters of a decoder-only transformer, read from model metadata
// (GGUF keys "<arch>.*"). Shared by every architecture file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/recurrent_state.h"

namespace spool {
namespace gguf { struct File; }

enum class RopeStyle { Normal, Neox };           // adjacent pairs vs. split halves
enum class RopeScaling { None, Linear, Yarn };
enum class ExpertGating { Softmax = 1, Sigmoid = 2 };  // GGUF expert_gating_func values

struct RopeConfig {
  RopeStyle style = RopeStyle::Normal;
  int n_dims = 0;               // rotated dimensions per head
  float freq_base = 10000.0f;
  RopeScaling scaling = RopeScaling::None;
  float freq_scale = 1.0f;      // 1 / scaling factor
  int n_ctx_orig = 0;           // YaRN: original training context
  float ext_factor = 0.0f;      // YaRN: extrapolation mix (1 when YaRN is on)
  float attn_factor = 1.0f;
  float beta_fast = 32.0f, beta_slow = 1.0f;
  float yarn_log_mul = 0.0f;    // DeepSeek YaRN: 0.1 * mscale_all_dim (0: none); scales attention logits
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2; kv_lora_rank 0: not MLA).
// Q comes from q_lora_rank-wide q_a/q_b (or one attn_q when q_lora_rank is 0);
// K/V from a kv_lora_rank-wide latent plus one shared rope key of rope.n_dims.
struct MlaConfig {
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int head_dim_k = 0;           // qk_nope_head_dim + qk_rope_head_dim, per head after decompression
  int head_dim_v = 0;           // v_head_dim
  bool nope = false;            // Kimi Linear / K3: the "rope" slice of q and k is used unrotated
  bool enabled() const { return kv_lora_rank > 0; }
};

// Kimi Delta Attention (Kimi Linear, K3; model/kda.h): n_head heads of
// head_dim key and value channels after a conv_kernel-wide causal conv.
struct KdaConfig {
  int n_head = 0;
  int head_dim = 0;
  int conv_kernel = 0;
  float gate_lower_bound = 0.0f;  // K3: g = lb * sigmoid(...); 0: Kimi Linear's -exp(A_log) * softplus(...)
  int d_inner() const { return n_head * head_dim; }
};

struct ModelConfig {
  std::string arch;             // general.architecture
  std::string name;             // general.name
  int n_vocab = 0;
  int n_ctx_train = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;           // attention.key_length (default n_embd / n_head)
  int head_dim_v = 0;
  int n_ff = 0;
  float rms_eps = 1e-5f;
  RopeConfig rope;

  // Mixture of experts (n_expert 0: every layer dense). Layers listed in
  // dense_ffn_layers keep a dense feed-forward of width n_ff.
  int n_expert = 0;
  int n_expert_used = 0;        // top-k experts per token
  int n_ff_exp = 0;             // width of one expert's feed-forward
  bool expert_weights_norm = true;  // renormalize the top-k router weights to sum to 1
  ExpertGating expert_gating = ExpertGating::Softmax;
  float expert_weights_scale = 1.0f;  // routed_scaling_factor: multiplies the routed weights
  int n_expert_group = 0;       // group-limited routing: experts split into groups ...
  int n_expert_group_used = 0;  // ... and only the best n_expert_group_used groups are eligible
  int n_expert_shared = 0;      // shared experts, always on (one SwiGLU of n_expert_shared * n_ff_exp)
  std::vector<int> dense_ffn_layers;
  bool is_moe_layer(int layer) const;
  // Kimi K3: routed experts work in a latent width (ffn_routed_down / _up
  // around them; 0: n_embd), and the feed-forwards use the "situ" activation
  // b tanh(g/b) sigmoid(g) * lb tanh(u/lb) instead of SwiGLU when situ_beta > 0.
  int n_embd_exp = 0;
  float situ_beta = 0.0f, situ_linear_beta = 0.0f;

  MlaConfig mla;
  KdaConfig kda;

  // Hybrid linear-attention models (Qwen3-Next, Kimi Linear / K3): per layer,
  // 1 for a linear-attention layer, which keeps recurrent state (sizes in
  // `recurrent`, filled by the architecture) and no KV rows. Empty: every
  // layer is full attention. The KV cache holds the attention layers only,
  // in order (kv_layer).
  std::vector<uint8_t> layer_recurrent;
  RecurrentShape recurrent;
  bool is_recurrent_layer(int layer) const {
    return layer >= 0 && layer < (int)layer_recurrent.size() && layer_recurrent[layer] != 0;
  }
  int n_attn_layer() const;      // layers with KV rows
  int kv_layer(int layer) const; // the KV layer of attention layer `layer`; -1 for a recurrent layer

  int q_dim() const { return n_head * head_dim_k; }
  int k_dim() const { return n_head_kv * head_dim_k; }
  int v_dim() const { return n_head_kv * head_dim_v; }
};

// Reads the common llama-family keys; n_vocab comes from the caller (the
// embedding tensor's row count). Throws spool::Error on missing/invalid keys.
ModelConfig read_config(const gguf::File& file, int n_vocab, RopeStyle style);

}  // namespace spool
