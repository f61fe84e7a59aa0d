// Qwen3-Next (GGUF architecture "qwen3next", HF qwen3_next): a hybrid of
// Gated DeltaNet linear attention (three of every four layers, with a
// per-sequence recurrent state) and gated full attention, each layer followed
// by a mixture of experts with a gated shared expert (blocks: gdn_model.h).
// Qwen3.5-MoE's text model (GGUF "qwen35moe", HF qwen3_5_moe) is the same
// forward with separate q/k/v, z, b and a projections (resolved at load) and
// the value heads tiled rather than grouped in llama.cpp's files; its text
// positions are equal on all three interleaved-MRoPE axes, so the rotation is
// plain NeoX on the rotary dims.
#include "model/arch_registry.h"
#include "model/gdn_model.h"
#include "model/ops.h"

namespace spool {
namespace {

class Qwen3NextModel final : public GatedDeltaNetModel {
 public:
  // v_grouped: llama.cpp's qwen3next keeps value heads grouped by key head, as
  // the checkpoints do; its converter tiles qwen35moe's (head j uses key head j % n_k).
  Qwen3NextModel(ModelParts parts, bool v_grouped) : GatedDeltaNetModel(std::move(parts), v_grouped) {}

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const ModelConfig& c = config_;
    const int n = batch.size();
    grow(n);
    float* x = s_.x.data();      // [n, n_embd] residual stream
    float* xn = s_.xn.data();    // [n, n_embd]
    float* out = s_.out.data();  // [n, n_embd]
    weights().will_use_layer(0);
    embed(batch, x);
    for (int l = 0; l < c.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      norm(*layers_[l].attn_norm, x, xn, n);
      if (c.is_recurrent_layer(l))
        linear_attention_layer(l, batch, kv, xn, out);  // Gated DeltaNet over each sequence's state
      else
        attention_layer(l, batch, kv, xn, out);  // gated full attention over the KV cache
      add_inplace(x, out, (int64_t)n * c.n_embd);
      norm(*layers_[l].post_norm, x, xn, n);
      ffn(l, xn, out, n);  // routed experts + sigmoid-gated shared expert
      add_inplace(x, out, (int64_t)n * c.n_embd);
    }
    advance_states(batch, kv);
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen3next_model(ModelParts parts) {
  return std::make_unique<Qwen3NextModel>(std::move(parts), true);
}

std::unique_ptr<Model> make_qwen35moe_model(ModelParts parts) {
  return std::make_unique<Qwen3NextModel>(std::move(parts), false);
}

}  // namespace spool
