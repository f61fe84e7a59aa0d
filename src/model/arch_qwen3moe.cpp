// Qwen3-MoE (GGUF architecture "qwen3moe", HF qwen3_moe): the Qwen3 block
// (per-head Q/K RMSNorm, NeoX rotary embeddings) whose feed-forward is a
// mixture of SwiGLU experts, top-k of softmax router scores; layers listed in
// mlp_only_layers (or skipped by decoder_sparse_step) keep a dense MLP.
#include "core/error.h"
#include "model/arch_registry.h"
#include "model/llama_family.h"

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
    const int n = batch.size();
    s_.resize(config_, n);
    float* x = s_.x.data();       // [n, n_embd] residual stream
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < config_.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      attention_block(l, batch, kv, x, n, QkNorm::PerHead);  // as qwen3: per-head q/k RMSNorm before rope
      ffn_block(l, x, n);  // top-k of the layer's experts; SwiGLU on mlp_only_layers
    }
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen3moe_model(ModelParts parts) {
  return std::make_unique<Qwen3MoeModel>(std::move(parts));
}

}  // namespace spool
