// Quantized Hugging Face checkpoints (format/hf_quant.h): the FP8 fixture's
// memory form (codes stay in the file, scales are companions), malformed FP8
// files; compressed-tensors pack-quantized int4 written here from an F32
// fixture with our own packing (written from the format's definition) against
// an F32 checkpoint holding the same dequantized values; and --convert.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/error.h"
#include "core/fp16.h"
#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "kernels/kernels.h"
#include "model/model.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

using namespace spool::test;

const std::string kFixtures = std::string(SPOOL_SHARED_DIR) + "/fixtures/";
const std::string kBin = SPOOL_BIN;

// mkdtemp directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "spool_hfq_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

std::vector<uint8_t> raw_bytes(const safetensors::File& f, const std::string& name) {
  const auto& e = f.require(name);
  std::vector<uint8_t> out(e.bytes);
  std::ifstream in(f.path, std::ios::binary);
  in.seekg((std::streamoff)e.offset);
  in.read(reinterpret_cast<char*>(out.data()), (std::streamsize)e.bytes);
  return out;
}

void copy_side_files(const std::string& fixture, const fs::path& dir) {
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(kFixtures + fixture + "/" + f))
      fs::copy_file(kFixtures + fixture + "/" + f, dir / f, fs::copy_options::overwrite_existing);
  fs::permissions(dir / "config.json", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
}

nlohmann::json read_config(const fs::path& dir) {
  nlohmann::json j;
  std::ifstream(dir / "config.json") >> j;
  return j;
}

// Tensors held as stored bytes, written back as one safetensors file.
struct TensorSet {
  std::vector<std::vector<uint8_t>> data;
  std::vector<SafetensorsRaw> raw;
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    data.push_back(std::move(bytes));
    raw.push_back({name, dtype, std::move(shape), nullptr});
  }
  template <class T>
  void add_values(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    add(name, dtype, std::move(shape), std::move(b));
  }
  void write(const fs::path& file) {
    for (size_t k = 0; k < raw.size(); ++k) raw[k].data = data[k].data();
    write_safetensors(file.string(), raw);
  }
};

// ---- FP8 ---------------------------------------------------------------------------------------------------

// The default form keeps every FP8 matrix in the file: its entry is mapped,
// not in memory, and its scale grid is a small companion entry.
TEST(HfFp8, CodesStayInTheFileWithScaleCompanions) {
  const gguf::File f = open_model_file(kFixtures + "deepseek3-fp8-tiny");
  uint64_t fp8_bytes = 0, in_memory = 0;
  int n_fp8 = 0;
  for (const TensorEntry& t : f.manifest.tensors) {
    if (t.memory) in_memory += t.bytes;
    if (t.type != DType::F8_E4M3) continue;
    ++n_fp8;
    fp8_bytes += t.bytes;
    EXPECT_EQ(t.memory, nullptr) << t.name;
    EXPECT_EQ(t.bytes, (uint64_t)t.n_elements()) << t.name;  // one byte per weight
    const TensorEntry& s = f.manifest.require(t.companion);
    EXPECT_EQ(s.type, DType::F32) << s.name;
    EXPECT_EQ(s.shape, (std::vector<int64_t>{(t.shape[0] + 127) / 128, (t.shape[1] + 127) / 128})) << s.name;
    EXPECT_EQ(s.expert, t.expert) << s.name;
  }
  EXPECT_EQ(n_fp8, 2 * 5 + 3 * 8 + 3 + 3);  // 2 layers of MLA (q_a q_b kv_a kv_b o), 8 experts + shared, a dense MLP
  std::printf("[ deepseek3-fp8-tiny ] %d FP8 matrices, %llu bytes in the file; %llu bytes converted in memory\n", n_fp8,
              (unsigned long long)fp8_bytes, (unsigned long long)in_memory);
  EXPECT_EQ(in_memory, 0u);  // norms are F32 in this file: nothing is copied
  const auto acquired = load_model(kFixtures + "deepseek3-fp8-tiny", LoadOptions{1});
  const TensorEntry& q_a = acquired->weights().manifest().require("blk.0.attn_q_a.weight");
  WeightRef r = acquired->weights().acquire(q_a);
  const MatView m = r.mat();
  EXPECT_EQ(m.type, DType::F8_E4M3);
  ASSERT_NE(m.block_scale, nullptr);
  EXPECT_EQ(m.block_rows, 128);
  EXPECT_EQ(m.scale_cols, 2);  // 256 columns
}

// Rewrites the FP8 fixture with `edit` applied to its tensor list and config.
void write_fp8_variant(const fs::path& dir, const std::function<void(TensorSet&, nlohmann::json&)>& edit) {
  copy_side_files("deepseek3-fp8-tiny", dir);
  const auto src = safetensors::open(kFixtures + "deepseek3-fp8-tiny/model.safetensors");
  TensorSet set;
  for (const auto& [name, e] : src.tensors) set.add(name, e.dtype, e.shape, raw_bytes(src, name));
  nlohmann::json cfg = read_config(dir);
  edit(set, cfg);
  std::ofstream(dir / "config.json") << cfg.dump(1);
  set.write(dir / "model.safetensors");
}

std::string load_error(const std::string& dir) {
  try {
    load_model(dir, LoadOptions{1});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfFp8, MalformedCheckpointsAreRefusedByName) {
  const std::string scale = "model.layers.0.self_attn.q_a_proj.weight_scale_inv";
  {
    TempDir tmp;  // missing scale grid
    write_fp8_variant(tmp.path, [&](TensorSet& s, nlohmann::json&) {
      for (size_t k = 0; k < s.raw.size(); ++k)
        if (s.raw[k].name == scale) s.raw.erase(s.raw.begin() + k), s.data.erase(s.data.begin() + k);
    });
    const std::string err = load_error(tmp.str());
    EXPECT_NE(err.find(scale), std::string::npos) << err;
    EXPECT_NE(err.find("missing"), std::string::npos) << err;
  }
  {
    TempDir tmp;  // scale grid of the wrong shape
    write_fp8_variant(tmp.path, [&](TensorSet& s, nlohmann::json&) {
      for (auto& r : s.raw)
        if (r.name == scale) r.shape = {2, 1};
    });
    const std::string err = load_error(tmp.str());
    EXPECT_NE(err.find("expected [1, 2]"), std::string::npos) << err;
  }
  {
    TempDir tmp;  // FP8 weights without an fp8 quantization_config
    write_fp8_variant(tmp.path, [](TensorSet&, nlohmann::json& cfg) { cfg.erase("quantization_config"); });
    const std::string err = load_error(tmp.str());
    EXPECT_NE(err.find("F8_E4M3 but config.json has no fp8 quantization_config"), std::string::npos) << err;
  }
  {
    TempDir tmp;  // e5m2 is another format
    write_fp8_variant(tmp.path, [](TensorSet&, nlohmann::json& cfg) { cfg["quantization_config"]["fmt"] = "e5m2"; });
    const std::string err = load_error(tmp.str());
    EXPECT_NE(err.find("fmt 'e5m2'"), std::string::npos) << err;
  }
}

// ---- compressed-tensors pack-quantized int4 ----------------------------------------------------------------

bool is_linear(const std::string& name) {
  return name.find("layers.") != std::string::npos && name.size() > 12 &&
         name.compare(name.size() - 12, 12, "_proj.weight") == 0;
}

// Symmetric int4 groups of `group` columns: scale = max|w| / 7 rounded to
// bf16, q = round(w / scale) clamped to [-8, 7]. Returns q (row-major) and the
// bf16 scales; `deq` gets q * scale.
void quantize_int4(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t group, std::vector<int8_t>& q,
                   std::vector<uint16_t>& scales, std::vector<float>& deq) {
  q.assign(rows * cols, 0);
  deq.assign(rows * cols, 0);
  scales.assign(rows * cols / group, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols / group; ++g) {
      float amax = 0;
      for (int64_t c = g * group; c < (g + 1) * group; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const uint16_t sb = fp32_to_bf16(amax / 7.0f);
      const float s = bf16_to_fp32(sb);
      scales[r * (cols / group) + g] = sb;
      for (int64_t c = g * group; c < (g + 1) * group; ++c) {
        const int v = s == 0 ? 0 : std::clamp((int)std::lrint(w[r * cols + c] / s), -8, 7);
        q[r * cols + c] = (int8_t)v;
        deq[r * cols + c] = v * s;
      }
    }
  }
}

// compressed-tensors pack_to_int32 along columns: value + 8 as an unsigned
// nibble, element c in bits 4 * (c % 8) of word c / 8 (zero padded).
std::vector<int32_t> pack_int4(const std::vector<int8_t>& q, int64_t rows, int64_t cols) {
  const int64_t words = (cols + 7) / 8;
  std::vector<int32_t> out(rows * words, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t nib = (uint32_t)(q[r * cols + c] + 8) & 0xF;
      out[r * words + c / 8] = (int32_t)((uint32_t)out[r * words + c / 8] | (nib << (4 * (c % 8))));
    }
  return out;
}

struct PackedPair {
  TempDir packed, dequant;
};

// From `fixture` (F32): `packed` holds every decoder Linear as pack-quantized
// int4 (group 32) and the rest as is; `dequant` the same values as F32.
// `edit` may damage the packed tensor set before it is written.
void write_packed_pair(const std::string& fixture, PackedPair& out,
                       const std::function<void(TensorSet&)>& edit = nullptr) {
  const auto src = safetensors::open(kFixtures + fixture + "/model.safetensors");
  copy_side_files(fixture, out.packed.path);
  copy_side_files(fixture, out.dequant.path);
  TensorSet packed, dequant;
  for (const auto& [name, e] : src.tensors) {
    std::vector<float> w = src.read_f32(name);
    if (!is_linear(name)) {
      packed.add_values(name, "F32", e.shape, w);
      dequant.add_values(name, "F32", e.shape, w);
      continue;
    }
    const int64_t rows = e.shape[0], cols = e.shape[1];
    std::vector<int8_t> q;
    std::vector<uint16_t> scales;
    std::vector<float> deq;
    quantize_int4(w, rows, cols, 32, q, scales, deq);
    const std::string base = name.substr(0, name.size() - 7);  // without ".weight"
    packed.add_values(base + ".weight_packed", "I32", {rows, (cols + 7) / 8}, pack_int4(q, rows, cols));
    packed.add_values(base + ".weight_scale", "BF16", {rows, cols / 32}, scales);
    packed.add_values(base + ".weight_shape", "I32", {2}, std::vector<int32_t>{(int32_t)rows, (int32_t)cols});
    dequant.add_values(name, "F32", e.shape, deq);
  }
  if (edit) edit(packed);
  packed.write(out.packed.path / "model.safetensors");
  dequant.write(out.dequant.path / "model.safetensors");
  nlohmann::json cfg = read_config(out.packed.path);
  cfg["quantization_config"] = {
      {"quant_method", "compressed-tensors"},
      {"format", "pack-quantized"},
      {"config_groups",
       {{"group_0",
         {{"targets", {"Linear"}},
          {"weights",
           {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 32},
            {"actorder", nullptr}, {"dynamic", false}}}}}}},
      {"ignore", {"lm_head"}},
  };
  std::ofstream(out.packed.path / "config.json") << cfg.dump(1);
}

// The repacked Q4_0 matrices hold exactly the dequantized values: the reader
// got the nibble order, the offset and the scales right.
TEST(HfInt4, RepackedWeightsEqualTheDequantizedValues) {
  PackedPair pair;
  write_packed_pair("qwen3-tiny", pair);
  const gguf::File packed = open_model_file(pair.packed.str());
  const gguf::File dequant = open_model_file(pair.dequant.str());
  int n_q4 = 0;
  uint64_t q4_bytes = 0, file_bytes = fs::file_size(pair.packed.path / "model.safetensors");
  for (const TensorEntry& t : packed.manifest.tensors) {
    if (t.type != DType::Q4_0) continue;
    ++n_q4;
    q4_bytes += t.bytes;
    const TensorEntry& d = dequant.manifest.require(t.name);
    ASSERT_EQ(d.shape, t.shape) << t.name;
    std::vector<float> got(t.n_elements()), want(t.n_elements());
    dequantize_row(DType::Q4_0, t.memory, got.data(), t.n_elements());
    safetensors::File f = safetensors::open(pair.dequant.str() + "/model.safetensors");
    std::ifstream in(f.path, std::ios::binary);
    in.seekg((std::streamoff)d.offset);
    in.read(reinterpret_cast<char*>(want.data()), (std::streamsize)d.bytes);
    EXPECT_EQ(got, want) << t.name;
  }
  EXPECT_EQ(n_q4, 7 * 2);  // q, k, v, o, gate, up, down in 2 layers
  // Group size 32: Q4_0's 18 bytes per 32 weights are the file's 16 packed + 2 of bf16 scale.
  const auto st = safetensors::open(pair.packed.str() + "/model.safetensors");
  uint64_t stored = 0;
  for (const auto& [name, e] : st.tensors)
    if (name.find(".weight_packed") != std::string::npos || name.find(".weight_scale") != std::string::npos)
      stored += e.bytes;
  EXPECT_EQ(q4_bytes, stored);
  std::printf("[ qwen3-tiny int4 ] %d matrices repacked to %llu bytes of Q4_0 (file %llu bytes)\n", n_q4,
              (unsigned long long)q4_bytes, (unsigned long long)file_bytes);
}

// Logits of the packed checkpoint against the F32 checkpoint of the same
// values: the only difference is Q4_0's dot product quantizing activations
// to Q8_0 (8-bit, one scale per 32). Measured 1.27e-2, the size of the Q8_0
// activation rounding on this model (--convert q8_0 of the F32 fixture, Q8_0
// weights and activations: 3.1e-2); bound 3e-2.
TEST(HfInt4, LogitsMatchTheDequantizedCheckpoint) {
  PackedPair pair;
  write_packed_pair("qwen3-tiny", pair);
  const auto ref = safetensors::open(kFixtures + "qwen3-tiny/reference.safetensors");
  const auto ids = to_i32(ref.read_i64("input_ids"));
  auto packed = load_model(pair.packed.str(), LoadOptions{2});
  auto dequant = load_model(pair.dequant.str(), LoadOptions{2});
  const std::vector<float> want = all_logits(*dequant, ids);
  const float err = rel_error(all_logits(*packed, ids), want);
  std::printf("[ qwen3-tiny int4 ] packed vs dequantized F32: relative error %.3g (int4 vs original: %.3g)\n", err,
              rel_error(want, ref.read_f32("logits")));
  EXPECT_LE(err, 3e-2f);
  EXPECT_GT(err, 0.0f);  // the Q8_0 activations do round: the path really is Q4_0
}

TEST(HfInt4, MalformedPackedCheckpointsAreRefusedByName) {
  const std::string base = "model.layers.1.mlp.down_proj";
  auto edit_error = [&](const std::function<void(TensorSet&)>& edit) {
    PackedPair pair;
    write_packed_pair("qwen3-tiny", pair, edit);
    return load_error(pair.packed.str());
  };
  std::string err = edit_error([&](TensorSet& s) {  // weight_shape says more columns than packed
    for (size_t k = 0; k < s.raw.size(); ++k)
      if (s.raw[k].name == base + ".weight_shape") {
        int32_t v[2];
        std::memcpy(v, s.data[k].data(), 8);
        v[1] += 32;
        std::memcpy(s.data[k].data(), v, 8);
      }
  });
  EXPECT_NE(err.find(base + ".weight_packed"), std::string::npos) << err;
  EXPECT_NE(err.find("expected I32"), std::string::npos) << err;
  err = edit_error([&](TensorSet& s) {  // scale missing
    for (size_t k = 0; k < s.raw.size(); ++k)
      if (s.raw[k].name == base + ".weight_scale") s.raw.erase(s.raw.begin() + k), s.data.erase(s.data.begin() + k);
  });
  EXPECT_NE(err.find("'" + base + ".weight_scale' is missing"), std::string::npos) << err;
  err = edit_error([&](TensorSet& s) {  // a scale float16 cannot hold (bf16 1e-30)
    for (size_t k = 0; k < s.raw.size(); ++k)
      if (s.raw[k].name == base + ".weight_scale") {
        const uint16_t tiny = fp32_to_bf16(1e-30f);
        std::memcpy(s.data[k].data(), &tiny, 2);
      }
  });
  EXPECT_NE(err.find("not exactly representable as float16"), std::string::npos) << err;
  err = edit_error([&](TensorSet& s) {  // asymmetric zero points
    s.add_values(base + ".weight_zero_point", "I32", {1, 4}, std::vector<int32_t>{0, 0, 0, 0});
  });
  EXPECT_NE(err.find("zero points"), std::string::npos) << err;
}

}  // namespace

// ---- --convert ---------------------------------------------------------------------------------------------

namespace convert {

const std::string kRef = "/reference.safetensors";

// max over positions and the median over positions of the per-position error, and the share of positions
// whose argmax agrees.
struct Errors {
  float overall, median;
  double argmax_agree;
};

Errors errors(const std::vector<float>& got, const std::vector<float>& want, size_t n_vocab) {
  const size_t n = want.size() / n_vocab;
  float m = 0;
  for (float x : want) m = std::max(m, std::fabs(x));
  std::vector<float> per(n);
  int agree = 0;
  for (size_t p = 0; p < n; ++p) {
    float e = 0;
    for (size_t i = 0; i < n_vocab; ++i) e = std::max(e, std::fabs(got[p * n_vocab + i] - want[p * n_vocab + i]));
    per[p] = e / m;
    const auto a = std::max_element(got.begin() + p * n_vocab, got.begin() + (p + 1) * n_vocab) - got.begin();
    const auto b = std::max_element(want.begin() + p * n_vocab, want.begin() + (p + 1) * n_vocab) - want.begin();
    agree += a == b;
  }
  Errors out{rel_error(got, want), 0, (double)agree / n};
  std::sort(per.begin(), per.end());
  out.median = per[n / 2];
  return out;
}

std::vector<float> logits_of(const std::string& path, std::optional<DType> to, const std::vector<int32_t>& ids) {
  LoadOptions o;
  o.n_threads = 2;
  o.convert = to;
  auto model = load_model(path, o);
  return all_logits(*model, ids);
}

}  // namespace convert

// HF qwen3-tiny converted to Q8_0 at load against the transformers reference,
// next to llama.cpp's own Q8_0 GGUF of the same model (README of the GGUF
// fixtures: 3.1e-2, median 1.5e-2, run by llama.cpp): Q8_0 weights and
// activations cost about the same whoever quantizes them. Bound: 5e-2.
TEST(HfConvert, Q8_0OnQwen3TinyIsAsCloseAsLlamaCppQ8_0) {
  const auto ref = safetensors::open(kFixtures + "qwen3-tiny" + convert::kRef);
  const auto ids = to_i32(ref.read_i64("input_ids"));
  const std::vector<float> want = ref.read_f32("logits");
  const auto hf = convert::errors(convert::logits_of(kFixtures + "qwen3-tiny", DType::Q8_0, ids), want, 512);
  const auto gguf = convert::errors(convert::logits_of(kFixtures + "gguf/qwen3-tiny.q8_0.gguf", {}, ids), want, 512);
  const auto plain = convert::errors(convert::logits_of(kFixtures + "qwen3-tiny", {}, ids), want, 512);
  std::printf("[ qwen3-tiny ] --convert q8_0: %.3g (median %.3g, argmax %.0f%%); GGUF q8_0 in spool: %.3g (median "
              "%.3g); as stored: %.3g\n",
              hf.overall, hf.median, 100 * hf.argmax_agree, gguf.overall, gguf.median, plain.overall);
  EXPECT_LE(hf.overall, 5e-2f);
  EXPECT_GT(hf.overall, 10 * plain.overall);  // it really is quantized
  const auto f16 = convert::errors(convert::logits_of(kFixtures + "qwen3-tiny", DType::F16, ids), want, 512);
  std::printf("[ qwen3-tiny ] --convert f16: %.3g\n", f16.overall);
  EXPECT_LE(f16.overall, 2e-3f);
}

// The FP8 fixture converted to Q8_0 (FP8 codes x block scales -> float ->
// Q8_0) against the reference, and against llama.cpp's Q8_0 GGUF of the same
// weights run by spool (llama.cpp itself: 4.0e-2, median 2.8e-2, argmax at
// 87.5% of positions, in the GGUF fixtures' README). Greedy decoding of this
// random tiny model is too close to ties to survive 8-bit weights (the Q8_0
// GGUF leaves the reference's path early too), so sanity is: logits within
// 8e-2, argmax at >= 80% of teacher-forced positions, and the same 16 greedy
// ids as spool on the Q8_0 GGUF (measured: all 16 equal; 1 of 16 as the F32 reference).
TEST(HfConvert, Q8_0OnTheFp8FixtureStaysSane) {
  const std::string dir = kFixtures + "deepseek3-fp8-tiny";
  const auto ref = safetensors::open(dir + convert::kRef);
  const auto ids = to_i32(ref.read_i64("input_ids"));
  const auto conv = convert::logits_of(dir, DType::Q8_0, ids);
  const auto gguf = convert::logits_of(kFixtures + "gguf/deepseek3-fp8-tiny.q8_0.gguf", {}, ids);
  const auto e = convert::errors(conv, ref.read_f32("logits"), 512);
  const auto g = convert::errors(gguf, ref.read_f32("logits"), 512);
  const float between = rel_error(conv, gguf);
  LoadOptions o;
  o.n_threads = 2;
  o.convert = DType::Q8_0;
  auto model = load_model(dir, o);
  for (const TensorEntry& t : model->weights().manifest().tensors) EXPECT_NE(t.type, DType::F8_E4M3) << t.name;
  const auto prompt = to_i32(ref.read_i64("prompt_ids"));
  const auto got = greedy(*model, prompt, 16);
  const auto want = to_i32(ref.read_i64("greedy_ids"));
  auto gguf_model = load_model(kFixtures + "gguf/deepseek3-fp8-tiny.q8_0.gguf", LoadOptions{2});
  const auto gguf_ids = greedy(*gguf_model, prompt, 16);
  auto common = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && a[n] == b[n]) ++n;
    return n;
  };
  std::printf("[ deepseek3-fp8-tiny ] --convert q8_0: %.3g (median %.3g, argmax %.0f%%); Q8_0 GGUF: %.3g (median "
              "%.3g, argmax %.0f%%); between them %.3g; greedy: %zu of 16 as the reference, %zu as the Q8_0 GGUF\n",
              e.overall, e.median, 100 * e.argmax_agree, g.overall, g.median, 100 * g.argmax_agree, between,
              common(got, want), common(got, gguf_ids));
  EXPECT_LE(e.overall, 8e-2f);
  EXPECT_GE(e.argmax_agree, 0.8);
  EXPECT_EQ(got, gguf_ids);
}

TEST(HfConvert, CliOptionAndBadTypes) {
  const std::string dir = kFixtures + "deepseek3-fp8-tiny";
  const auto ref = safetensors::open(dir + convert::kRef);
  int status = -1;
  const std::string ids = run_stdout(kBin + " run -m " + dir + " -t 2 --convert q8_0 --prompt-ids " +
                                         join(to_i32(ref.read_i64("prompt_ids"))) +
                                         " -n 16 --temp 0 --output-ids 2>/dev/null",
                                     &status);
  EXPECT_EQ(status, 0);
  LoadOptions o;
  o.n_threads = 2;
  o.convert = DType::Q8_0;
  auto model = load_model(dir, o);
  EXPECT_EQ(ids, join(greedy(*model, to_i32(ref.read_i64("prompt_ids")), 16)) + "\n");  // CLI = library
  for (const char* bad : {"q9_9", "f8_e4m3"}) {
    TempDir tmp;
    const std::string out = run_stdout(
        kBin + " logits -m " + dir + " --convert " + bad + " --ids 1,2 --out " + tmp.str() + "/l.st 2>&1", &status);
    EXPECT_NE(status, 0) << bad;
    EXPECT_NE(out.find("--convert"), std::string::npos) << out;
  }
}
