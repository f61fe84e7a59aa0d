// kimi_linear checkpoint -> GGUF in llama.cpp's kimi-linear layout (see kimi_convert.h).
// Every tensor is read into memory as F32: meant for small checkpoints (fixtures).
#include "model/kimi_convert.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "format/gguf_writer.h"
#include "format/hf_checkpoint.h"
#include "model/model.h"
#include "storage/local_file.h"

namespace spool {
namespace {

struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;  // GGUF order
  std::vector<float> data;
};

std::vector<float> read_f32(const gguf::File& f, const TensorEntry& t) {
  std::vector<uint8_t> raw(t.bytes);
  if (t.memory) std::memcpy(raw.data(), t.memory, t.bytes);
  else LocalFile(f.manifest.files[t.file]).read(t.offset, t.bytes, raw.data());
  std::vector<float> out(t.n_elements());
  if (t.type == DType::F32) std::memcpy(out.data(), raw.data(), out.size() * sizeof(float));
  else if (t.type == DType::F16 || t.type == DType::BF16) dequantize_row(t.type, raw.data(), out.data(), (int64_t)out.size());
  else throw Error("tensor '" + t.name + "' is " + dtype_name(t.type) + "; only F32/F16/BF16 checkpoints convert");
  return out;
}

// Metadata of the opened checkpoint in the value types llama.cpp's loader
// expects (u32 sizes, f32 floats, i32 arrays); spool's own keys are dropped.
gguf::Value llama_typed(const gguf::Value& v) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::INT64: case ValueType::UINT64: return gguf::value_u32((uint32_t)v.i);
    case ValueType::FLOAT64: return gguf::value_f32((float)v.f);
    case ValueType::ARRAY:
      if (v.elem_type == ValueType::INT64) return gguf::value_int_array(ValueType::INT32, v.ints);
      return v;
    default: return v;
  }
}

}  // namespace

void write_kimi_linear_gguf(const std::string& hf_dir, const std::string& out_path) {
  const gguf::File f = open_model_file(hf_dir);
  if (f.architecture() != "kimi-linear") throw Error("'" + hf_dir + "' is not a kimi_linear checkpoint");
  const std::string a = "kimi-linear.";
  const Manifest& m = f.manifest;
  const int n_layer = (int)f.get_int(a + "block_count"), n_head = (int)f.get_int(a + "attention.head_count");
  const int n_expert = (int)f.get_int(a + "expert_count");
  const int kv_lora = (int)f.get_int(a + "attention.kv_lora_rank"), rope = (int)f.get_int(a + "rope.dimension_count");
  const int nope = (int)f.get_int(a + "attention.key_length_mla") - rope;
  const int dv = (int)f.get_int(a + "attention.value_length_mla");
  const gguf::Value& hkv = f.kv.at(a + "attention.head_count_kv");

  gguf::Writer w;
  for (const auto& [key, v] : f.kv) {
    if (key.rfind("spool.", 0) == 0) continue;
    w.set(key, llama_typed(v));
  }
  w.set("general.file_type", gguf::value_u32(0));  // all F32
  // Dense feed-forwards must be the leading layers (llama.cpp's leading_dense_block_count).
  int n_dense = 0;
  if (const gguf::Value* d = f.find(hf::kDenseFfnLayersKey))
    for (size_t i = 0; i < d->ints.size(); ++i) {
      if (d->ints[i] != (int64_t)i) throw Error("kimi-linear GGUF: dense feed-forward layers must lead");
      ++n_dense;
    }
  w.set(a + "leading_dense_block_count", gguf::value_u32((uint32_t)n_dense));

  std::vector<OutTensor> out;
  auto copy = [&](const std::string& name) {
    const TensorEntry& t = m.require(name);
    out.push_back({name, t.shape, read_f32(f, t)});
  };
  copy("token_embd.weight");
  copy("output_norm.weight");
  if (m.find("output.weight")) copy("output.weight");
  for (int l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    copy(p + "attn_norm.weight");
    copy(p + "ffn_norm.weight");
    if (hkv.ints.at(l) == 0) {  // Kimi Delta Attention
      for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "ssm_f_a.weight", "ssm_f_b.weight",
                            "ssm_beta.weight", "ssm_g_a.weight", "ssm_g_b.weight", "ssm_dt.bias", "ssm_norm.weight",
                            "attn_output.weight"})
        copy(p + n);
      for (const char* n : {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"}) {
        const TensorEntry& t = m.require(p + n);  // HF [C, 1, K] -> GGUF [K, 1, C, 1], same bytes
        out.push_back({p + n, {t.shape[0], 1, t.n_elements() / t.shape[0], 1}, read_f32(f, t)});
      }
      std::vector<float> A = read_f32(f, m.require(p + "ssm_a_log"));
      for (float& x : A) x = -std::exp(x);
      out.push_back({p + "ssm_a", {1, (int64_t)A.size(), 1, 1}, A});
    } else {  // MLA, with kv_b split per head as the absorbed form wants it
      for (const char* n : {"attn_q.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_output.weight"})
        copy(p + n);
      const std::vector<float> kv_b = read_f32(f, m.require(p + "attn_kv_b.weight"));  // [H * (nope + dv)] rows of kv_lora
      std::vector<float> k_b((size_t)n_head * kv_lora * nope), v_b((size_t)n_head * dv * kv_lora);
      for (int h = 0; h < n_head; ++h) {
        const float* head = kv_b.data() + (size_t)h * (nope + dv) * kv_lora;
        for (int i = 0; i < nope; ++i)  // k_b[h]: kv_lora rows of nope (the K half transposed)
          for (int j = 0; j < kv_lora; ++j) k_b[((size_t)h * kv_lora + j) * nope + i] = head[(size_t)i * kv_lora + j];
        std::memcpy(v_b.data() + (size_t)h * dv * kv_lora, head + (size_t)nope * kv_lora, (size_t)dv * kv_lora * sizeof(float));
      }
      out.push_back({p + "attn_k_b.weight", {nope, kv_lora, n_head}, k_b});
      out.push_back({p + "attn_v_b.weight", {kv_lora, dv, n_head}, v_b});
    }
    if (l < n_dense) {
      for (const char* n : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) copy(p + n);
      continue;
    }
    for (const char* n : {"ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                          "ffn_down_shexp.weight"})
      if (m.find(p + n)) copy(p + n);
    for (const char* n : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
      OutTensor s{p + n, {}, {}};
      for (int e = 0; e < n_expert; ++e) {
        const TensorEntry& t = m.require(expert_slice_name(p + n, e));
        if (e == 0) s.shape = {t.shape[0], t.shape[1], n_expert};
        const std::vector<float> x = read_f32(f, t);
        s.data.insert(s.data.end(), x.begin(), x.end());
      }
      out.push_back(std::move(s));
    }
  }
  for (const OutTensor& t : out) w.add_tensor(t.name, DType::F32, t.shape);
  w.begin(out_path);
  for (size_t i = 0; i < out.size(); ++i) w.write_tensor(i, out[i].data.data());
  w.finish();
}

}  // namespace spool
