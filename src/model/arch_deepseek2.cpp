// DeepSeek-V2/V3 and Kimi-K2 (GGUF architecture "deepseek2", HF deepseek_v3):
// a pre-norm decoder with multi-head latent attention (model/mla.h) and a
// feed-forward that is dense on the first leading_dense_block_count layers and
// a mixture of experts after them (sigmoid or softmax routing with a selection
// bias, expert groups, scaled weights, plus always-on shared experts).
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/arch_registry.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/ops.h"

namespace spool {
namespace {

constexpr int kFfnTokenChunk = 64;  // tokens per pass through the dense FFN (see ffn_dense)

struct Deepseek2Layer {
  const TensorEntry* attn_norm = nullptr;  // [n_embd]
  MlaLayerWeights attn;
  const TensorEntry* ffn_norm = nullptr;   // [n_embd]
  const TensorEntry *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;  // dense layers
  MoeLayerWeights moe;                                                             // MoE layers
};

class Deepseek2Model final : public Model {
 public:
  explicit Deepseek2Model(ModelParts parts) : Model(std::move(parts)) {
    const Manifest& m = weights().manifest();
    const TensorEntry& embd = m.require("token_embd.weight");
    if (embd.shape.size() != 2) throw Error("tensor 'token_embd.weight' must be 2-D, is " + embd.shape_string());
    config_ = read_config(file(), (int)embd.shape[1], RopeStyle::Normal);
    const ModelConfig& c = config_;
    if (!c.mla.enabled()) throw Error("deepseek2 model has no attention.kv_lora_rank in its metadata");
    if (c.n_vocab != tokenizer().n_vocab())
      throw Error("token_embd.weight has " + std::to_string(c.n_vocab) + " rows but the tokenizer has " +
                  std::to_string(tokenizer().n_vocab()) + " tokens");
    token_embd_ = &embd;
    output_norm_ = &expect_tensor(m, "output_norm.weight", {c.n_embd});
    output_ = optional_tensor(m, "output.weight", {c.n_embd, c.n_vocab});
    if (!output_) output_ = token_embd_;
    std::vector<const TensorEntry*> mats = {output_};  // every matmul weight, for packing
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      Deepseek2Layer L;
      L.attn_norm = &expect_tensor(m, p + "attn_norm.weight", {c.n_embd});
      L.attn = load_mla_weights(m, p, c);
      L.ffn_norm = &expect_tensor(m, p + "ffn_norm.weight", {c.n_embd});
      if (c.is_moe_layer(l)) {
        L.moe = load_moe_weights(m, p, c);
        const auto experts = moe_matmul_weights(L.moe);
        mats.insert(mats.end(), experts.begin(), experts.end());
      } else {
        L.ffn_gate = &expect_tensor(m, p + "ffn_gate.weight", {c.n_embd, c.n_ff});
        L.ffn_up = &expect_tensor(m, p + "ffn_up.weight", {c.n_embd, c.n_ff});
        L.ffn_down = &expect_tensor(m, p + "ffn_down.weight", {c.n_ff, c.n_embd});
        mats.insert(mats.end(), {L.ffn_gate, L.ffn_up, L.ffn_down});
      }
      for (const TensorEntry* t : {L.attn.q, L.attn.q_a, L.attn.q_b, L.attn.kv_a, L.attn.wo})
        if (t) mats.push_back(t);
      for (const TensorEntry* t : {L.attn_norm, L.ffn_norm})
        if (t->type != DType::F32) throw Error("tensor '" + t->name + "' must be F32, is " + dtype_name(t->type));
      layers_.push_back(L);
    }
    if (output_norm_->type != DType::F32) throw Error("tensor 'output_norm.weight' must be F32");
    for (const Deepseek2Layer& L : layers_) attn_.emplace_back(config_, L.attn, mla_s_);
    weights().prepare_matmul_weights(mats, &pool());
  }

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const ModelConfig& c = config_;
    const int n = batch.size(), d = c.n_embd;
    auto grow = [](std::vector<float>& v, size_t size) { if (v.size() < size) v.resize(size); };
    grow(x_, (size_t)n * d);
    grow(xn_, (size_t)n * d);
    grow(out_, (size_t)n * d);
    float* x = x_.data();    // [n, n_embd] residual stream
    float* xn = xn_.data();  // [n, n_embd]
    float* out = out_.data();  // [n, n_embd]
    weights().will_use_layer(0);  // streaming stores read ahead; the resident store ignores these hints
    embed(batch, x);
    for (int l = 0; l < c.n_layer; ++l) {
      const Deepseek2Layer& L = layers_[l];
      weights().will_use_layer(l + 1);
      norm(*L.attn_norm, x, xn, n);
      attn_[l].forward(weights(), pool(), kv, l, batch, xn, out, mla_form());  // [n, n_embd]
      add_inplace(x, out, (int64_t)n * d);

      norm(*L.ffn_norm, x, xn, n);
      if (l + 1 < c.n_layer && c.is_moe_layer(l + 1))  // speculative: layer l+1's router on this hidden state
        guess_next_experts(weights(), pool(), c, layers_[l + 1].moe, xn, n, moe_s_);
      if (c.is_moe_layer(l))
        moe_forward(weights(), pool(), c, L.moe, xn, out, n, moe_s_, expert_parallel());  // [n, n_embd] routed + shared experts
      else
        ffn_dense(L, xn, out, n);  // [n, n_embd]
      add_inplace(x, out, (int64_t)n * d);
    }
    output_logits(batch, x, logits);  // [n_outputs, n_vocab]
  }

 private:
  MlaForm mla_form() const {
    return parts_.options.mla_form == MlaForm::Plain ? MlaForm::Plain : MlaForm::Absorbed;
  }

  void embed(const Batch& batch, float* x) {
    WeightRef e = weights().acquire(*token_embd_);
    for (int t = 0; t < batch.size(); ++t) {
      const int32_t tok = batch.tokens[t];
      if (tok < 0 || tok >= config_.n_vocab)
        throw Error("token id " + std::to_string(tok) + " is out of range (vocab " + std::to_string(config_.n_vocab) + ")");
      get_row(e.mat(), tok, x + (size_t)t * config_.n_embd);
    }
  }

  void norm(const TensorEntry& w, const float* x, float* out, int n) {
    WeightRef r = weights().acquire(w);
    rms_norm(x, r.f32(), out, n, config_.n_embd, config_.rms_eps);
  }

  void linear(const TensorEntry& w, const float* x, float* y, int n) {
    WeightRef r = weights().acquire(w);
    matmul(pool(), r.mat(), x, n, y, mm_);
  }

  // Tokens go through in chunks of kFfnTokenChunk, so gate/up ([tokens, n_ff],
  // the widest activations) stay small whatever the batch; a matmul row does
  // not depend on the other rows of a batch of two or more, so no chunk is
  // left a lone row unless the whole batch is one.
  void ffn_dense(const Deepseek2Layer& L, const float* xn, float* out, int n) {
    const size_t n_ff = config_.n_ff, d = config_.n_embd;
    const int chunk = std::min(n, kFfnTokenChunk);
    if (gate_.size() < chunk * n_ff) gate_.resize(chunk * n_ff), up_.resize(chunk * n_ff);
    if (n == chunk) {  // one chunk: hold one matrix at a time (a streaming store may have few slots)
      linear(*L.ffn_gate, xn, gate_.data(), n);  // [n, n_ff]
      linear(*L.ffn_up, xn, up_.data(), n);      // [n, n_ff]
      swiglu(gate_.data(), up_.data(), (int64_t)n * n_ff);
      linear(*L.ffn_down, gate_.data(), out, n);  // [n, n_embd]
      return;
    }
    WeightRef gate = weights().acquire(*L.ffn_gate), up = weights().acquire(*L.ffn_up),
              down = weights().acquire(*L.ffn_down);
    for (int t0 = 0, nc; t0 < n; t0 += nc) {
      nc = std::min(chunk, n - t0);
      if (n - t0 - nc == 1) --nc;
      matmul_pair(pool(), gate.mat(), up.mat(), xn + t0 * d, nc, gate_.data(), up_.data(), mm_);  // [nc, n_ff] each
      swiglu(gate_.data(), up_.data(), (int64_t)nc * n_ff);
      matmul(pool(), down.mat(), gate_.data(), nc, out + t0 * d, mm_);  // [nc, n_embd]
    }
  }

  void output_logits(const Batch& batch, const float* x, float* logits) {
    const int d = config_.n_embd;
    int n_out = 0;
    for (int t = 0; t < batch.size(); ++t)
      if (batch.want_logits[t]) std::memcpy(xn_.data() + (size_t)n_out++ * d, x + (size_t)t * d, d * sizeof(float));
    if (n_out == 0) return;
    norm(*output_norm_, xn_.data(), xn_.data(), n_out);  // [n_out, n_embd]
    linear(*output_, xn_.data(), logits, n_out);         // [n_out, n_vocab]
  }

  const TensorEntry *token_embd_ = nullptr, *output_norm_ = nullptr, *output_ = nullptr;
  std::vector<Deepseek2Layer> layers_;
  MlaScratch mla_s_;                 // activation buffers every layer's attention shares
  std::vector<MlaAttention> attn_;  // one per layer
  std::vector<float> x_, xn_, out_, gate_, up_;
  std::vector<uint8_t> mm_;
  MoeScratch moe_s_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek2_model(ModelParts parts) {
  return std::make_unique<Deepseek2Model>(std::move(parts));
}

}  // namespace spool
