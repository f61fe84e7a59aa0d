// kimi_linear -> llama.cpp's kimi-linear GGUF layout (see kimi_convert.h).
#include "format/kimi_convert.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "format/hf_checkpoint.h"

namespace spool {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<float> f32_of(const ExportTensor& t) {
  if (t.type != DType::F32) throw Error("kimi-linear GGUF: tensor '" + t.name + "' is not F32");
  return t.f32();
}

// attn_kv_b [kv_lora, H * (nope + dv)] -> attn_k_b [nope, kv_lora, H] (each head's K half
// transposed) and attn_v_b [kv_lora, dv, H] (each head's V half as it is).
std::pair<ExportTensor, ExportTensor> split_kv_b(const ExportTensor& kv_b, int n_head, int nope, int dv) {
  const int L = (int)kv_b.shape[0];
  const std::vector<float> w = f32_of(kv_b);
  std::vector<float> k((size_t)n_head * L * nope), v((size_t)n_head * dv * L);
  for (int h = 0; h < n_head; ++h) {
    const float* head = w.data() + (size_t)h * (nope + dv) * L;
    for (int i = 0; i < nope; ++i)
      for (int j = 0; j < L; ++j) k[((size_t)h * L + j) * nope + i] = head[(size_t)i * L + j];
    std::memcpy(v.data() + (size_t)h * dv * L, head + (size_t)nope * L, (size_t)dv * L * sizeof(float));
  }
  const std::string base = kv_b.name.substr(0, kv_b.name.size() - std::string("attn_kv_b.weight").size());
  ExportTensor kt, vt;
  kt.name = base + "attn_k_b.weight";
  kt.shape = {nope, L, n_head};
  kt.set_f32(k);
  vt.name = base + "attn_v_b.weight";
  vt.shape = {L, dv, n_head};
  vt.set_f32(v);
  return {std::move(kt), std::move(vt)};
}

}  // namespace

void kimi_to_llama_layout(gguf::File& meta, std::vector<ExportTensor>& tensors) {
  if (meta.architecture() != "kimi-linear") return;
  const std::string a = "kimi-linear.";
  const int n_head = (int)meta.get_int(a + "attention.head_count");
  const int rope = (int)meta.get_int(a + "rope.dimension_count");
  const int nope = (int)meta.get_int(a + "attention.key_length_mla") - rope;
  const int dv = (int)meta.get_int(a + "attention.value_length_mla");
  // Dense feed-forwards must be the leading layers (llama.cpp's leading_dense_block_count).
  int64_t n_dense = 0;
  if (const gguf::Value* d = meta.find(hf::kDenseFfnLayersKey))
    for (int64_t l : d->ints) {
      if (l != n_dense) throw Error("kimi-linear GGUF: dense feed-forward layers must be the leading ones");
      ++n_dense;
    }
  meta.kv[a + "leading_dense_block_count"] = gguf::Value::of_int(n_dense);

  std::vector<ExportTensor> out;
  for (ExportTensor& t : tensors) {
    if (ends_with(t.name, "attn_kv_b.weight")) {
      auto [k, v] = split_kv_b(t, n_head, nope, dv);
      out.push_back(std::move(k));
      out.push_back(std::move(v));
      continue;
    }
    if (ends_with(t.name, ".ssm_a_log")) {  // llama.cpp stores A = -exp(A_log), [1, n_head, 1, 1]
      std::vector<float> x = f32_of(t);
      for (float& e : x) e = -std::exp(e);
      t.name = t.name.substr(0, t.name.size() - 4);
      t.shape = {1, (int64_t)x.size(), 1, 1};
      t.set_f32(x);
    } else if (t.name.find(".ssm_conv1d_") != std::string::npos) {  // HF [C, 1, K] -> [K, 1, C, 1], same bytes
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      t.shape = {t.shape[0], 1, n / t.shape[0], 1};
    }
    out.push_back(std::move(t));
  }
  tensors = std::move(out);
}

}  // namespace spool
