// Llama 2/3, Mistral, Mixtral (GGUF architecture "llama"): pre-norm decoder,
// GQA attention with rotary embeddings (adjacent-pair order, as llama.cpp's
// converter permutes Q/K), SwiGLU feed-forward (Mixtral: a mixture of SwiGLU
// experts where the layer has them), optional Q/K/V biases.
#include "model/arch_registry.h"
#include "model/llama_family.h"

namespace spool {
namespace {

class LlamaModel final : public LlamaFamilyModel {
 public:
  explicit LlamaModel(ModelParts parts) : LlamaFamilyModel(std::move(parts), RopeStyle::Normal) {}

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const int n = batch.size();
    s_.resize(config_, n);
    float* x = s_.x.data();       // [n, n_embd] residual stream
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < config_.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      attention_block(l, batch, kv, x, n, QkNorm::None);  // GQA, rope in adjacent-pair order, optional Q/K/V biases
      ffn_block(l, x, n);  // SwiGLU; Mixtral: top-k of the layer's experts
    }
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_llama_model(ModelParts parts) { return std::make_unique<LlamaModel>(std::move(parts)); }

}  // namespace spool
