// Qwen3 dense (GGUF architecture "qwen3"): the llama block with a per-head
// RMSNorm on queries and keys before rotary embeddings (NeoX order), no QKV
// biases, and a head_dim that need not equal n_embd / n_head.
#include "core/error.h"
#include "model/arch_registry.h"
#include "model/llama_family.h"

namespace spool {
namespace {

class Qwen3Model final : public LlamaFamilyModel {
 public:
  explicit Qwen3Model(ModelParts parts) : LlamaFamilyModel(std::move(parts), RopeStyle::Neox) {
    for (const LlamaLayerWeights& L : w_.layers)
      if (!L.q_norm || !L.k_norm) throw Error("qwen3 model is missing attn_q_norm/attn_k_norm weights");
  }

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const int n = batch.size();
    s_.resize(config_, n);
    float* x = s_.x.data();       // [n, n_embd] residual stream
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < config_.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      attention_block(l, batch, kv, x, n, QkNorm::PerHead);  // per-head RMSNorm on q and k before rope (NeoX order)
      ffn_block(l, x, n);  // SwiGLU
    }
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen3_model(ModelParts parts) { return std::make_unique<Qwen3Model>(std::move(parts)); }

}  // namespace spool
