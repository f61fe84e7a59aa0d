// Kimi Linear (GGUF architecture "kimi-linear", HF kimi_linear): a pre-norm
// hybrid decoder whose layers are Kimi Delta Attention (linear attention with
// a per-sequence recurrent state, model/kda.h) or NoPE multi-head latent
// attention (model/mla.h), each followed by a dense SwiGLU (leading layers) or
// a sigmoid-routed mixture of experts with a shared expert (model/moe.h).
#include "core/error.h"
#include "model/arch_registry.h"
#include "model/kimi_common.h"
#include "model/ops.h"

namespace spool {
namespace {

class KimiLinearModel final : public KimiModelBase {
 public:
  explicit KimiLinearModel(ModelParts parts) : KimiModelBase(std::move(parts)) {
    load_common();
    for (const KimiLayer& L : layers_) mla_.emplace_back(config_, L.mla, mla_s_);
    weights().prepare_matmul_weights(mats_, &pool());
  }

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const ModelConfig& c = config_;
    const int n = batch.size(), d = c.n_embd;
    check_recurrent_positions(batch, kv);
    auto grow = [](std::vector<float>& v, size_t size) { if (v.size() < size) v.resize(size); };
    grow(x_, (size_t)n * d);
    grow(xn_, (size_t)n * d);
    grow(out_, (size_t)n * d);
    float* x = x_.data();      // [n, n_embd] residual stream
    float* xn = xn_.data();    // [n, n_embd]
    float* out = out_.data();  // [n, n_embd]
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < c.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      norm(*layers_[l].attn_norm, x, xn, n);
      attention(l, batch, kv, xn, out);  // [n, n_embd] KDA or MLA
      add_inplace(x, out, (int64_t)n * d);
      norm(*layers_[l].ffn_norm, x, xn, n);
      if (l + 1 < c.n_layer && c.is_moe_layer(l + 1))  // speculative: layer l+1's router on this hidden state
        guess_next_experts(weights(), pool(), c, layers_[l + 1].moe, xn, n, moe_s_);
      feed_forward(l, xn, out, n);  // [n, n_embd]
      add_inplace(x, out, (int64_t)n * d);
    }
    advance_recurrent(batch, kv);
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }
};

}  // namespace

std::unique_ptr<Model> make_kimi_linear_model(ModelParts parts) {
  return std::make_unique<KimiLinearModel>(std::move(parts));
}

}  // namespace spool
