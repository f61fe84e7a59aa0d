// Qwen2 / Qwen2.5 (GGUF architecture "qwen2"): the llama block with biases on
// Q, K and V and rotary embeddings in NeoX (split-halves) order.
#include "model/arch_registry.h"
#include "model/llama_family.h"

namespace spool {
namespace {

class Qwen2Model final : public LlamaFamilyModel {
 public:
  explicit Qwen2Model(ModelParts parts) : LlamaFamilyModel(std::move(parts), RopeStyle::Neox) {}

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const int n = batch.size();
    s_.resize(config_, n);
    float* x = s_.x.data();       // [n, n_embd] residual stream
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < config_.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      attention_block(l, batch, kv, x, n, QkNorm::None);  // GQA with Q/K/V biases, rope in NeoX order
      ffn_block(l, x, n);  // SwiGLU
    }
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen2_model(ModelParts parts) { return std::make_unique<Qwen2Model>(std::move(parts)); }

}  // namespace spool
