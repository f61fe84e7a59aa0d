// Weights and blocks shared by the llama-family architectures (llama, qwen2,
// qwen3, qwen3moe): a pre-norm decoder with GQA attention and a SwiGLU
// feed-forward, or a mixture of SwiGLU experts on MoE layers (model/moe.h).
// Each architecture file composes these in its own forward().
#pragma once

#include <vector>

#include "model/model.h"
#include "model/moe.h"

namespace spool {

struct LlamaLayerWeights {
  const TensorEntry* attn_norm = nullptr;                       // [n_embd]
  const TensorEntry *wq = nullptr, *wk = nullptr, *wv = nullptr; // [n_embd, q_dim|k_dim|v_dim]
  const TensorEntry *bq = nullptr, *bk = nullptr, *bv = nullptr; // optional biases
  const TensorEntry *q_norm = nullptr, *k_norm = nullptr;        // optional [head_dim] (qwen3)
  const TensorEntry* wo = nullptr;                               // [n_head*head_dim_v, n_embd]
  const TensorEntry* ffn_norm = nullptr;                         // [n_embd]
  const TensorEntry *ffn_gate = nullptr, *ffn_up = nullptr;      // [n_embd, n_ff]   dense layers
  const TensorEntry* ffn_down = nullptr;                         // [n_ff, n_embd]   dense layers
  MoeLayerWeights moe;                                           // MoE layers (router set)
  bool has_experts() const { return moe.router != nullptr; }
};

struct LlamaWeights {
  const TensorEntry* token_embd = nullptr;   // [n_embd, n_vocab]
  const TensorEntry* output_norm = nullptr;  // [n_embd]
  const TensorEntry* output = nullptr;       // [n_embd, n_vocab] (token_embd when tied)
  const TensorEntry* rope_freqs = nullptr;   // optional [rope.n_dims / 2]
  std::vector<LlamaLayerWeights> layers;
};

// Finds and shape-checks every tensor for cfg (with `layers` false: only the
// embeddings, output and rope factors; hybrid architectures load their own layers).
LlamaWeights load_llama_weights(const Manifest& m, const ModelConfig& cfg, bool layers = true);

// Activation buffers for one forward pass, grown as needed.
struct LlamaScratch {
  std::vector<float> x, xn, q, k, v, att, gate, up, out;  // see forward() for shapes
  std::vector<uint8_t> mm;                              // matmul activation conversion
  void resize(const ModelConfig& cfg, int n_tokens);
};

// Per-head RMSNorm of queries and keys before rotary embeddings (qwen3, qwen3moe).
enum class QkNorm { None, PerHead };

// Shared pieces; each architecture's forward() calls them in order.
class LlamaFamilyModel : public Model {
 public:
  LlamaFamilyModel(ModelParts parts, RopeStyle style);

 protected:
  // For architectures whose layers are not llama blocks (hybrids): reads the
  // config and the embeddings, output and rope factors; w_.layers stays empty
  // and the derived class prepares its own matmul weights.
  struct OwnLayers {};
  LlamaFamilyModel(ModelParts parts, RopeStyle style, OwnLayers);

 protected:
  void embed(const Batch& batch, float* x);                       // x: [n_tokens, n_embd]
  void norm(const TensorEntry& w, const float* x, float* out, int n_tokens);
  void linear(const TensorEntry& w, const float* x, float* y, int n_tokens);
  void linear_bias(const TensorEntry& w, const TensorEntry* b, const float* x, float* y, int n_tokens);
  // y[i] = x w[i]^T for matrices reading the same x (one activation conversion and one pool job when packed).
  void linear_many(std::initializer_list<const TensorEntry*> w, std::initializer_list<float*> y, const float* x,
                   int n_tokens);
  // s_.q, s_.k, s_.v from the normed input (with the layer's Q/K/V biases, if any).
  void qkv(const LlamaLayerWeights& L, const float* xn, int n_tokens);
  void head_norm(const TensorEntry* w, float* x, int n_tokens, int n_heads);  // per-head RMSNorm
  void rope_inplace(float* x, int n_tokens, int n_heads, const Batch& batch);
  void ffn_swiglu(const LlamaLayerWeights& L, const float* xn, float* out, int n_tokens);
  void ffn_moe(const LlamaLayerWeights& L, const float* xn, float* out, int n_tokens);  // routed experts
  // The two halves of a llama block, each adding its output to the residual
  // stream x [n_tokens, n_embd]:
  // attention: x += wo · attention(rope(q), rope(k), v), q/k/v from norm(x), k/v stored in layer l of kv;
  void attention_block(int l, const Batch& batch, KvCache& kv, float* x, int n_tokens, QkNorm qk_norm);
  // feed-forward: x += ffn(norm(x)), the layer's routed experts when it has them, else SwiGLU.
  void ffn_block(int l, float* x, int n_tokens);
  // Final norm + output projection for the rows that want logits.
  void output_logits(const Batch& batch, const float* x, float* logits);

  LlamaWeights w_;
  LlamaScratch s_;
  MoeScratch moe_s_;
  std::vector<float> rope_freqs_;
};

}  // namespace spool
