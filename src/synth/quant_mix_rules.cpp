// llama.cpp's per-tensor quantization choices, re-derived from what its
// quantizer does (not its code): output and token_embd get wider types, the
// attn_v-like and ffn_down tensors of the low-bit file types get more bits on
// some layers (the first eighth of ffn_down; use_more_bits for Q4_K_M), IQ3
// files shift attn_q/k and part of the FFN; models with 8 experts (Mixtral)
// and grouped-query attention (n_gqa >= 4) keep attn_v at Q4_K or wider.
// Not modelled: Falcon's and 70B-llama special cases, Q2_K/Q3_K/Q5_K mixes.
#include "synth/quant_mix_rules.h"

#include <cstdio>

#include "format/tensor_class.h"

namespace spool::quant_mix {
namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The first and last eighth of the layers, and every third layer in between.
bool use_more_bits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// Layer index for the FFN rules: MoE files parse it from the name (experts
// are not one tensor per layer); dense files use the running counter.
int ffn_layer(const MixModel& m, const std::string& name, int counter) {
  if (m.n_expert <= 1) return counter;
  int layer = -1;
  return std::sscanf(name.c_str(), "blk.%d.", &layer) == 1 ? layer : counter;
}

bool any_of(int ft, std::initializer_list<int> fts) {
  for (int f : fts)
    if (f == ft) return true;
  return false;
}

// The 1-2-bit file types, which share one rule branch in llama.cpp.
bool low_bit(int ft) { return any_of(ft, {kIQ2_XXS, kIQ2_XS, kIQ1_S, kIQ2_S, kIQ2_M, kIQ1_M}); }

DType output_type(int ft, DType base, int64_t row_length) {
  if (ft == kMXFP4_MOE) return DType::Q8_0;
  if (row_length % dtype_traits(base).block_size != 0) return DType::Q8_0;
  if (any_of(ft, {kIQ2_XXS, kIQ2_XS, kIQ3_XXS, kIQ1_S, kIQ2_S, kIQ2_M, kIQ1_M})) return DType::Q5_K;
  return base == DType::Q8_0 ? base : DType::Q6_K;
}

DType token_embd_type(int ft, DType base) {
  if (any_of(ft, {kIQ2_XXS, kIQ2_XS, kIQ1_S, kIQ1_M})) return DType::Q2_K;
  if (any_of(ft, {kIQ2_S, kIQ2_M, kIQ3_XXS})) return DType::IQ3_S;
  if (any_of(ft, {kTQ1_0, kTQ2_0, kQ2_0})) return DType::Q4_K;
  return base;
}

DType low_bit_rule(int ft, DType t, const MixModel& m, Category cat, Counters& c) {
  const bool wide2 = ft == kIQ2_S || ft == kIQ2_M;  // IQ2_S / IQ2_M step up to IQ3_S where the others use Q2_K
  if (is_attn_v_like(cat)) {
    ++c.i_attention_wv;
    if (m.n_gqa >= 4 || m.n_expert >= 4) return DType::Q4_K;
    return wide2 ? DType::IQ3_S : DType::Q2_K;
  }
  if (m.n_expert == 8 && cat == Category::AttnK) return DType::Q4_K;
  if (cat == Category::FfnDown) {
    const bool first_eighth = c.i_ffn_down < c.n_ffn_down / 8;  // llama.cpp counts ffn_down tensors here, not layers
    ++c.i_ffn_down;
    if (first_eighth) return wide2 ? DType::IQ3_S : DType::Q2_K;
    return t;
  }
  if (cat == Category::AttnOutput) {
    if (m.n_expert == 8) return DType::Q5_K;
    if (ft == kIQ1_S || ft == kIQ1_M) return DType::IQ2_XXS;
    if (wide2) return DType::IQ3_S;
  }
  return t;
}

DType attn_v_rule(int ft, DType t, const MixModel& m, Counters& c) {
  if (ft == kIQ3_XXS) t = m.n_gqa >= 4 ? DType::Q4_K : m.has_imatrix ? DType::IQ3_XXS : DType::IQ3_S;
  else if ((ft == kIQ3_XS || ft == kIQ3_S) && m.n_gqa >= 4) t = DType::Q4_K;
  else if (ft == kIQ3_M) t = DType::Q4_K;
  else if ((ft == kIQ4_NL || ft == kIQ4_XS) && m.n_gqa >= 4) t = DType::Q5_K;
  else if ((ft == kQ4_K_M || ft == kQ5_K_M) && use_more_bits(c.i_attention_wv, c.n_attention_wv)) t = DType::Q6_K;
  if (m.n_expert == 8) t = DType::Q8_0;
  ++c.i_attention_wv;
  return t;
}

DType ffn_down_rule(int ft, DType t, const MixModel& m, const std::string& name, Counters& c) {
  const int i = ffn_layer(m, name, c.i_ffn_down), n = c.n_ffn_down;
  ++c.i_ffn_down;
  if (ft == kIQ3_XXS && !m.has_imatrix) return i < n / 8 ? DType::Q4_K : DType::Q3_K;
  if (ft == kIQ3_M && (i < n / 8 || (m.n_expert == 8 && use_more_bits(i, n)))) return DType::Q4_K;
  if (ft == kQ4_K_M) return use_more_bits(i, n) ? DType::Q6_K : t;
  if (i < n / 8 && (ft == kIQ4_NL || ft == kIQ4_XS) && !m.has_imatrix) return DType::Q5_K;
  if (ft == kQ5_K_M && use_more_bits(i, n)) return DType::Q6_K;
  return t;
}

DType attn_output_rule(int ft, DType t, const MixModel& m) {
  if (m.n_expert == 8) {
    return any_of(ft, {kIQ3_XS, kIQ3_XXS, kIQ4_NL, kQ4_K_S, kQ4_K_M, kIQ3_S, kIQ3_M, kIQ4_XS}) ? DType::Q5_K : t;
  }
  if (ft == kIQ3_XXS) return DType::IQ3_S;
  if (ft == kIQ3_M) return DType::Q4_K;
  return t;
}

// IQ3_XS keeps the first and last eighth of the gate/up projections at IQ3_S, the middle IQ3_XXS.
DType gate_up_rule(int ft, DType t, const MixModel& m, const std::string& name, int& counter, int n) {
  const int i = ffn_layer(m, name, counter);
  ++counter;
  if (ft == kIQ3_XS && i >= n / 8 && i < 7 * n / 8) return DType::IQ3_XXS;
  return t;
}

}  // namespace

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (has(name, "attn_qkv.weight")) return Category::AttnQkv;
  if (has(name, "attn_kv_b.weight")) return Category::AttnKvB;
  if (has(name, "attn_v.weight")) return Category::AttnV;
  if (has(name, "attn_k.weight")) return Category::AttnK;
  if (has(name, "attn_q.weight")) return Category::AttnQ;
  if (has(name, "attn_output.weight")) return Category::AttnOutput;
  if (has(name, "ffn_up")) return Category::FfnUp;
  if (has(name, "ffn_gate")) return Category::FfnGate;
  if (has(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

DType llama_rule(const QuantRecipe& r, const MixModel& m, const std::string& name, int64_t row_length, Counters& c) {
  const int ft = r.file_type;
  const DType t = r.base;
  const Category cat = category_of(name);
  if (cat == Category::Output || (c.tied_embeddings && cat == Category::TokenEmbd)) return output_type(ft, t, row_length);
  if (cat == Category::TokenEmbd) return token_embd_type(ft, t);
  if (low_bit(ft)) return low_bit_rule(ft, t, m, cat, c);
  switch (cat) {
    case Category::AttnV: case Category::AttnQkv: case Category::AttnKvB:
      return attn_v_rule(ft, t, m, c);  // fused qkv takes the attn_v branch (llama.cpp's own qkv branch is never reached)
    case Category::AttnK:
      if (m.n_expert == 8) return DType::Q8_0;
      if (ft == kIQ3_XS) return DType::IQ3_XXS;
      if (ft == kIQ3_XXS) return DType::IQ2_S;
      return t;
    case Category::AttnQ:
      if (ft == kIQ3_XS) return DType::IQ3_XXS;
      if (ft == kIQ3_XXS) return DType::IQ2_S;
      return t;
    case Category::FfnDown: return ffn_down_rule(ft, t, m, name, c);
    case Category::AttnOutput: return attn_output_rule(ft, t, m);
    case Category::FfnGate: return gate_up_rule(ft, t, m, name, c.i_ffn_gate, c.n_ffn_gate);
    case Category::FfnUp: return gate_up_rule(ft, t, m, name, c.i_ffn_up, c.n_ffn_up);
    default: return t;
  }
}

DType dynamic_down_type(DType expert_type) {
  switch (expert_type) {
    case DType::IQ1_S: case DType::IQ1_M: return DType::IQ2_XXS;
    case DType::IQ2_XXS: return DType::Q2_K;
    default: return expert_type;
  }
}

DType dynamic_rule(const QuantRecipe& r, const std::string& name) {
  const bool down = has(name, "ffn_down");
  switch (tensor_class(name)) {
    case TensorClass::RoutedExperts: return down ? dynamic_down_type(r.base) : r.base;
    case TensorClass::Output: return DType::Q6_K;
    case TensorClass::SharedExperts: case TensorClass::DenseFfn: return down ? DType::Q6_K : DType::Q4_K;
    default: return DType::Q4_K;  // token_embd, attention, other matrices
  }
}

DType fallback(DType t, int64_t row_length) {
  if (row_length % dtype_traits(t).block_size == 0) return t;
  DType f;
  switch (t) {
    case DType::Q2_K: case DType::Q3_K: f = DType::Q4_0; break;
    case DType::Q4_K: f = DType::Q5_0; break;
    case DType::Q5_K: f = DType::Q5_1; break;
    case DType::Q6_K: f = DType::Q8_0; break;
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S: case DType::IQ1_M: case DType::IQ4_XS: f = DType::IQ4_NL; break;
    case DType::TQ1_0: case DType::TQ2_0: case DType::Q2_0: f = DType::Q4_0; break;  // Q1_0: F16 (llama.cpp has none)
    default: f = DType::F16; break;
  }
  return row_length % dtype_traits(f).block_size == 0 ? f : DType::F16;
}

}  // namespace spool::quant_mix
