// Qwen3-MoE (GGUF architecture "qwen3moe", HF qwen3_moe): the Qwen3 block
// (per-head Q/K RMSNorm, NeoX rotary embeddings) whose feed-forward is a
// mixture of SwiGLU experts, top-k of softmax router scores; layers listed in
// mlp_only_layers (or skipped by decoder_sparse_step) keep a dense MLP.
#include <cmath>

#include "core/error.h"
#include "model/arch_registry.h"
#include "model/llama_family.h"
#include "model/ops.h"

namespace spool {
namespace {

class Qwen3MoeModel final : public LlamaFamilyModel {
 public:
  explicit Qwen3MoeModel(ModelParts parts) : LlamaFamilyModel(std::move(parts), RopeStyle::Neox) {
    if (config_.n_expert == 0) throw Error("qwen3moe model has no expert_count in its metadata");
    for (const LlamaLayerWeights& L : w_.layers)
      if (!L.q_norm || !L.k_norm) throw Error("qwen3moe model is missing attn_q_norm/attn_k_norm weights");
  }

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const ModelConfig& c = config_;
    const int n = batch.size();
    s_.resize(c, n);
    float* x = s_.x.data();    // [n, n_embd] residual stream
    float* xn = s_.xn.data();  // [n, n_embd]
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < c.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      const LlamaLayerWeights& L = w_.layers[l];
      norm(*L.attn_norm, x, xn, n);
      qkv(L, xn, n);  // q: [n, n_head * head_dim], k: [n, n_head_kv * head_dim], v: [n, n_head_kv * head_dim]
      head_norm(L.q_norm, s_.q.data(), n, c.n_head);
      head_norm(L.k_norm, s_.k.data(), n, c.n_head_kv);
      rope_inplace(s_.q.data(), n, c.n_head, batch);
      rope_inplace(s_.k.data(), n, c.n_head_kv, batch);
      kv_store(kv, l, batch, s_.k.data(), s_.v.data());
      attention(pool(), c, kv, l, batch, s_.q.data(), s_.att.data(), 1.0f / std::sqrt((float)c.head_dim_k));
      linear(*L.wo, s_.att.data(), s_.out.data(), n);  // [n, n_embd]
      add_inplace(x, s_.out.data(), (int64_t)n * c.n_embd);

      norm(*L.ffn_norm, x, xn, n);
      if (L.has_experts())
        ffn_moe(L, xn, s_.out.data(), n);  // [n, n_embd] top-k of the layer's experts
      else
        ffn_swiglu(L, xn, s_.out.data(), n);  // [n, n_embd] dense layer (mlp_only_layers)
      add_inplace(x, s_.out.data(), (int64_t)n * c.n_embd);
    }
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen3moe_model(ModelParts parts) {
  return std::make_unique<Qwen3MoeModel>(std::move(parts));
}

}  // namespace spool
