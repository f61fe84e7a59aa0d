// Kimi K3 (GGUF architecture "kimi-k3", as llama.cpp lays it out): Kimi
// Linear's hybrid of Kimi Delta Attention (here with a full-rank output gate
// and a sigmoid forget gate bounded below by kda.gate_lower_bound) and NoPE
// MLA (here with a sigmoid output gate), plus:
//  - attention residuals: instead of a plain residual stream, every attention,
//    feed-forward and the output read a softmax mix of banked checkpoints (the
//    raw input of every attn_res.block_size-th layer) and the current stream,
//    scored by a learned vector against each candidate's RMS-normed value;
//    a banking layer restarts the stream from its attention output;
//  - a latent MoE: routed experts work in expert_latent_length-wide rows
//    (ffn_routed_down / _up around them), the shared expert on the full row;
//  - the situ activation instead of SwiGLU.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/arch_registry.h"
#include "model/kimi_common.h"
#include "model/ops.h"

namespace spool {
namespace {

class KimiK3Model final : public KimiModelBase {
 public:
  explicit KimiK3Model(ModelParts parts) : KimiModelBase(std::move(parts)) {
    load_common();
    const ModelConfig& c = config_;
    const Manifest& m = weights().manifest();
    block_size_ = (int)file().get_int(c.arch + ".attn_res.block_size", 0);
    if (block_size_ < 0) throw Error("model metadata: attn_res.block_size must not be negative");
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      KimiLayer& L = layers_[l];
      if (!c.is_recurrent_layer(l)) {
        L.mla.gate = optional_tensor(m, p + "attn_gate.weight", {c.n_embd, c.n_head * c.mla.head_dim_v});
        if (L.mla.gate) mats_.push_back(L.mla.gate);
      }
      if (block_size_ > 0) {
        attn_res_.push_back(&f32_vector(m, p + "attn_res_score.weight"));
        ffn_res_.push_back(&f32_vector(m, p + "ffn_res_score.weight"));
      }
    }
    if (block_size_ > 0) output_res_ = &f32_vector(m, "output_res_score.weight");
    for (const KimiLayer& L : layers_) mla_.emplace_back(config_, L.mla, mla_s_);
    weights().prepare_matmul_weights(mats_, &pool());
  }

  void forward(const Batch& batch, KvCache& kv, float* logits) override {
    const ModelConfig& c = config_;
    const int n = batch.size(), d = c.n_embd;
    const size_t nd = (size_t)n * d;
    check_recurrent_positions(batch, kv);
    auto grow = [](std::vector<float>& v, size_t size) { if (v.size() < size) v.resize(size); };
    grow(x_, nd);
    grow(xn_, nd);
    grow(out_, nd);
    grow(mix_, nd);
    float* h = x_.data();      // [n, n_embd] the residual stream
    float* xn = xn_.data();    // [n, n_embd]
    float* out = out_.data();  // [n, n_embd]
    float* in = mix_.data();   // [n, n_embd] a block's input: the stream mixed with the bank
    int n_bank = 0;            // checkpoints banked so far, [n_bank][n, n_embd] in bank_
    weights().will_use_layer(0);
    embed(batch, h);
    for (int l = 0; l < c.n_layer; ++l) {
      weights().will_use_layer(l + 1);
      const bool restart = block_size_ > 0 && l % block_size_ == 0;
      mix(h, attn_res_, l, n_bank, n, in);
      if (restart) {  // bank this layer's raw input
        grow(bank_, (size_t)(n_bank + 1) * nd);
        std::memcpy(bank_.data() + n_bank++ * nd, h, nd * sizeof(float));
      }
      norm(*layers_[l].attn_norm, in, xn, n);
      attention(l, batch, kv, xn, out);  // [n, n_embd] KDA or MLA
      if (restart) std::memcpy(h, out, nd * sizeof(float));
      else add_inplace(h, out, (int64_t)nd);
      mix(h, ffn_res_, l, n_bank, n, in);
      norm(*layers_[l].ffn_norm, in, xn, n);
      if (l + 1 < c.n_layer && c.is_moe_layer(l + 1))  // a guess: prefetch only
        guess_next_experts(weights(), pool(), c, layers_[l + 1].moe, xn, n, moe_s_);
      feed_forward(l, xn, out, n);  // [n, n_embd]
      add_inplace(h, out, (int64_t)nd);
    }
    advance_recurrent(batch, kv);
    std::vector<const TensorEntry*> last = {output_res_};
    mix(h, last, 0, n_bank, n, in);
    output_logits(batch, in, logits);  // [n_outputs, n_vocab]
  }

 private:
  static const TensorEntry& f32_vector(const Manifest& m, const std::string& name) {
    const TensorEntry& t = m.require(name);
    if (t.type != DType::F32) throw Error("tensor '" + name + "' must be F32, is " + dtype_name(t.type));
    return t;
  }

  // out = softmax-weighted sum over the n_bank checkpoints and x (per token),
  // each candidate scored by sum(rmsnorm(candidate) * score); x when there
  // is no bank or no score vector.   x, out: [n, n_embd]
  void mix(const float* x, const std::vector<const TensorEntry*>& scores, int l, int n_bank, int n, float* out) {
    const int d = config_.n_embd;
    if (block_size_ == 0 || n_bank == 0 || !scores[l]) {
      std::memcpy(out, x, (size_t)n * d * sizeof(float));
      return;
    }
    WeightRef w = weights().acquire(*scores[l]);
    const float* sw = w.f32();
    std::vector<float> p(n_bank + 1), normed(d);
    for (int t = 0; t < n; ++t) {
      auto candidate = [&](int j) {
        return j < n_bank ? bank_.data() + ((size_t)j * n + t) * d : x + (size_t)t * d;
      };
      float mx = -INFINITY;
      for (int j = 0; j <= n_bank; ++j) {
        rms_norm(candidate(j), nullptr, normed.data(), 1, d, config_.rms_eps);
        float s = 0;
        for (int i = 0; i < d; ++i) s += normed[i] * sw[i];
        p[j] = s;
        mx = std::max(mx, s);
      }
      float sum = 0;
      for (float& v : p) sum += v = std::exp(v - mx);
      float* o = out + (size_t)t * d;
      std::fill(o, o + d, 0.0f);
      for (int j = 0; j <= n_bank; ++j) {
        const float* cj = candidate(j);
        const float pj = p[j] / sum;
        for (int i = 0; i < d; ++i) o[i] += pj * cj[i];
      }
    }
  }

  int block_size_ = 0;  // attn_res.block_size (0: plain residual stream)
  std::vector<const TensorEntry*> attn_res_, ffn_res_;  // per layer [n_embd]
  const TensorEntry* output_res_ = nullptr;             // [n_embd]
  std::vector<float> mix_, bank_;
};

}  // namespace

std::unique_ptr<Model> make_kimi_k3_model(ModelParts parts) {
  return std::make_unique<KimiK3Model>(std::move(parts));
}

}  // namespace spool
