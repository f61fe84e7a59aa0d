// Llama 2/3, Mistral, Mixtral (GGUF architecture "llama"): pre-norm decoder,
// GQA attention with rotary embeddings (adjacent-pair order, as llama.cpp's
// converter permutes Q/K), SwiGLU feed-forward (Mixtral: a mixture of SwiGLU
// experts where the layer has them), optional Q/K/V biases.
#include <cmath>

#include "model/arch_registry.h"
#include "model/llama_family.h"
#include "model/ops.h"

namespace spool {
namespace {

class LlamaModel final : public LlamaFamilyModel {
 public:
  explicit LlamaModel(ModelParts parts) : LlamaFamilyModel(std::move(parts), RopeStyle::Normal) {}

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const ModelConfig& c = config_;
    const int n = batch.size();
    s_.resize(c, n);
    float* x = s_.x.data();    // [n, n_embd] residual stream
    float* xn = s_.xn.data();  // [n, n_embd] normed input of a block
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < c.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      const LlamaLayerWeights& L = w_.layers[l];
      norm(*L.attn_norm, x, xn, n);
      qkv(L, xn, n);  // q: [n, n_head * head_dim], k: [n, n_head_kv * head_dim], v: [n, n_head_kv * head_dim_v]
      rope_inplace(s_.q.data(), n, c.n_head, batch);
      rope_inplace(s_.k.data(), n, c.n_head_kv, batch);
      kv_store(kv, l, batch, s_.k.data(), s_.v.data());
      attention(pool(), c, kv, l, batch, s_.q.data(), s_.att.data(), 1.0f / std::sqrt((float)c.head_dim_k));
      linear(*L.wo, s_.att.data(), s_.out.data(), n);  // [n, n_embd]
      add_inplace(x, s_.out.data(), (int64_t)n * c.n_embd);

      norm(*L.ffn_norm, x, xn, n);
      if (L.has_experts())
        ffn_moe(L, xn, s_.out.data(), n);  // [n, n_embd] Mixtral: top-k of the layer's experts
      else
        ffn_swiglu(L, xn, s_.out.data(), n);  // [n, n_embd]
      add_inplace(x, s_.out.data(), (int64_t)n * c.n_embd);
    }
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_llama_model(ModelParts parts) { return std::make_unique<LlamaModel>(std::move(parts)); }

}  // namespace spool
