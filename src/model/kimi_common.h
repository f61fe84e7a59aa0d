// What the Kimi hybrid architectures (kimi-linear, kimi-k3) share: the
// per-layer choice of Kimi Delta Attention (model/kda.h) or MLA
// (model/mla.h), the dense or MoE feed-forward, the recurrent-state shape, and
// the embedding / norm / output helpers. Each architecture file composes these
// in its own forward().
#pragma once

#include <vector>

#include "model/kda.h"
#include "model/mla.h"
#include "model/model.h"
#include "model/moe.h"

namespace spool {

struct KimiLayer {
  const TensorEntry* attn_norm = nullptr;  // [n_embd]
  KdaLayerWeights kda;                     // linear-attention layers
  MlaLayerWeights mla;                     // full-attention layers
  const TensorEntry* ffn_norm = nullptr;   // [n_embd]
  const TensorEntry *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;  // dense layers
  MoeLayerWeights moe;                                                             // MoE layers
};

class KimiModelBase : public Model {
 public:
  explicit KimiModelBase(ModelParts parts) : Model(std::move(parts)) {}

 protected:
  // Reads the config (and the kda.* keys), checks it, and loads every layer;
  // the K3 file adds its own tensors after this.
  void load_common();
  // The sequences of the batch continue their recurrent state: each one's
  // first position is the number of tokens its state holds and its positions
  // are consecutive. Throws spool::Error otherwise.
  void check_recurrent_positions(const Batch& batch, KvCache& kv) const;
  // Records the batch's tokens as folded into each sequence's state.
  void advance_recurrent(const Batch& batch, KvCache& kv) const;
  // out = the layer's attention (KDA or MLA) of xn.   xn, out: [n, n_embd]
  void attention(int layer, const Batch& batch, KvCache& kv, const float* xn, float* out);
  // out = the layer's feed-forward (dense, or MoE with shared experts) of xn.
  void feed_forward(int layer, const float* xn, float* out, int n);

  void embed(const Batch& batch, float* x);
  void norm(const TensorEntry& w, const float* x, float* out, int n);
  void linear(const TensorEntry& w, const float* x, float* y, int n);
  void ffn_dense(const KimiLayer& L, const float* xn, float* out, int n);
  // Final norm + output projection for the rows of x that want logits.
  void output_logits(const Batch& batch, const float* x, float* logits);

  MlaForm mla_form() const {
    return parts_.options.mla_form == MlaForm::Plain ? MlaForm::Plain : MlaForm::Absorbed;
  }

  const TensorEntry *token_embd_ = nullptr, *output_norm_ = nullptr, *output_ = nullptr;
  std::vector<KimiLayer> layers_;
  std::vector<const TensorEntry*> mats_;  // every matmul weight, for packing
  std::vector<MlaAttention> mla_;         // one per layer (unused on KDA layers)
  MlaScratch mla_s_;
  KdaScratch kda_s_;
  MoeScratch moe_s_;
  std::vector<float> x_, xn_, out_, gate_, up_;
  std::vector<uint8_t> mm_;
};

}  // namespace spool
