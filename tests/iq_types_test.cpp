// The low-bit GGUF types (IQ1-IQ4, TQ1_0/TQ2_0, Q1_0/Q2_0) against the peer:
// tests/data/iq_reference.gguf holds, per type, weights quantized by llama.cpp's
// ggml and the floats ggml dequantizes them to (bench/peer/make_iq_reference.sh).
// spool's dequantization must give the same floats bit for bit on every ISA
// table, and its dot products must equal the dot of the dequantized values.
// On a trained model llama.cpp quantized (stories260K widened to 256-wide rows,
// bench/peer/make_trained_iq_fixture.sh), spool's greedy ids equal llama.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "format/gguf.h"
#include "kernels/iq_codebooks.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "test_util.h"

namespace spool {
namespace {

const std::string kReference = std::string(SPOOL_SOURCE_DIR) + "/tests/data/iq_reference.gguf";

std::vector<uint8_t> tensor_bytes(const gguf::File& f, const std::string& name) {
  const TensorEntry& e = f.manifest.require(name);
  std::ifstream in(f.manifest.files[e.file], std::ios::binary);
  std::vector<uint8_t> out(e.bytes);
  in.seekg((std::streamoff)e.offset);
  in.read(reinterpret_cast<char*>(out.data()), (std::streamsize)out.size());
  EXPECT_TRUE(in.good()) << name;
  return out;
}

const DType kTypes[] = {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,
                        DType::IQ1_S,   DType::IQ1_M,  DType::IQ4_NL, DType::IQ4_XS, DType::TQ1_0,
                        DType::TQ2_0,   DType::Q1_0,   DType::Q2_0};

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

TEST(IqTypes, CodebooksMatchTheFormat) { EXPECT_TRUE(iq_codebooks_match_reference()); }

TEST(IqTypes, TraitsMatchTheFile) {
  const gguf::File f = gguf::open(kReference);
  for (DType t : kTypes) {
    const TensorEntry& e = f.manifest.require("q." + lower(dtype_name(t)));
    EXPECT_EQ(e.type, t);
    EXPECT_EQ(e.bytes, row_bytes(t, e.shape[0]) * (size_t)e.shape[1]) << dtype_name(t);
  }
}

TEST(IqTypes, DequantizationEqualsThePeersBitForBit) {
  const gguf::File f = gguf::open(kReference);
  for (Isa isa : available_isas()) {
    const KernelTable& table = *kernels_for(isa);
    for (DType t : kTypes) {
      const std::string name = lower(dtype_name(t));
      const TensorEntry& e = f.manifest.require("q." + name);
      const std::vector<uint8_t> q = tensor_bytes(f, "q." + name);
      const std::vector<uint8_t> ref_bytes = tensor_bytes(f, "ref." + name);
      std::vector<float> ref(ref_bytes.size() / 4), ours(ref.size());
      std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
      ASSERT_NE(table[t].dequantize, nullptr) << name;
      table[t].dequantize(q.data(), ours.data(), e.n_elements());
      int mismatches = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        if (std::memcmp(&ref[i], &ours[i], 4) != 0 && mismatches++ < 3)
          ADD_FAILURE() << isa_name(isa) << " " << name << " element " << i << ": ours " << ours[i] << ", peer "
                        << ref[i];
      EXPECT_EQ(mismatches, 0) << isa_name(isa) << " " << name;
    }
  }
}

TEST(IqTypes, DotProductsEqualTheDotOfDequantizedValues) {
  const gguf::File f = gguf::open(kReference);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Isa isa : available_isas()) {
    const KernelTable& table = *kernels_for(isa);
    for (DType t : kTypes) {
      const std::string name = lower(dtype_name(t));
      const TensorEntry& e = f.manifest.require("q." + name);
      const int64_t n_cols = e.shape[0], n_rows = e.shape[1];
      const std::vector<uint8_t> q = tensor_bytes(f, "q." + name);
      std::vector<float> w(n_cols * n_rows);
      table[t].dequantize(q.data(), w.data(), n_cols * n_rows);
      std::vector<float> x(n_cols), xq(n_cols);
      for (float& v : x) v = normal(rng);
      const DType act = dtype_traits(t).vec_dot_type;
      std::vector<uint8_t> a(row_bytes(act, n_cols));
      table[act].quantize(x.data(), a.data(), n_cols);
      table[act].dequantize(a.data(), xq.data(), n_cols);
      for (int64_t r = 0; r < n_rows; ++r) {
        double expect = 0, magnitude = 0;
        for (int64_t i = 0; i < n_cols; ++i) {
          expect += (double)w[r * n_cols + i] * xq[i];
          magnitude += std::fabs((double)w[r * n_cols + i] * xq[i]);
        }
        const float got = table[t].vec_dot(n_cols, q.data() + r * row_bytes(t, n_cols), a.data());
        EXPECT_NEAR(got, expect, 1e-5 * magnitude + 1e-6) << isa_name(isa) << " " << name << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace spool

namespace spool {
namespace {

// spool's quantizers (plain nearest-point searches) against ggml's
// importance-weighted ones on the same weights: the relative RMS error of
// the round trip must stay within a margin of the peer's.
TEST(IqTypes, QuantizersComeCloseToThePeers) {
  const gguf::File f = gguf::open(kReference);
  const KernelTable& table = kernels();
  for (DType t : kTypes) {
    const std::string name = lower(dtype_name(t));
    const TensorEntry& e = f.manifest.require("src." + name);
    const int64_t n = e.n_elements();
    std::vector<float> src(n), peer(n), ours(n);
    const std::vector<uint8_t> sb = tensor_bytes(f, "src." + name), pb = tensor_bytes(f, "ref." + name);
    std::memcpy(src.data(), sb.data(), sb.size());
    std::memcpy(peer.data(), pb.data(), pb.size());
    std::vector<uint8_t> q(row_bytes(t, n));
    ASSERT_NE(table[t].quantize, nullptr) << name;
    table[t].quantize(src.data(), q.data(), n);
    table[t].dequantize(q.data(), ours.data(), n);
    double e_ours = 0, e_peer = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      e_ours += (double)(src[i] - ours[i]) * (src[i] - ours[i]);
      e_peer += (double)(src[i] - peer[i]) * (src[i] - peer[i]);
      norm += (double)src[i] * src[i];
    }
    const double r_ours = std::sqrt(e_ours / norm), r_peer = std::sqrt(e_peer / norm);
    std::printf("%-8s relative RMSE: spool %.4f, llama.cpp %.4f\n", name.c_str(), r_ours, r_peer);
    EXPECT_LT(r_ours, 1.25 * r_peer + 0.01) << name;
  }
}

// llama.cpp's 32 greedy ids after the text's first 16 tokens (its attention in
// F32, as spool's), on files its llama-imatrix + llama-quantize made; the same
// ids under every SPOOL_ISA cap, and under qemu for NEON (spool_arm_tests).
TEST(IqTypes, GreedyIdsEqualLlamaCppOnATrainedModel) {
  const std::string dir = std::string(SPOOL_SOURCE_DIR) + "/tests/data/";
  std::ifstream in(dir + "stories260K-x4-greedy.txt");
  ASSERT_TRUE(in.good());
  auto ids = [](const std::string& csv) {
    std::vector<int32_t> v;
    std::stringstream ss(csv);
    for (std::string x; std::getline(ss, x, ',');) v.push_back(std::stoi(x));
    return v;
  };
  std::vector<int32_t> prompt;
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find(' ');
    ASSERT_NE(sp, std::string::npos) << line;
    const std::string key = line.substr(0, sp);
    if (key == "prompt") {
      prompt = ids(line.substr(sp + 1));
      continue;
    }
    const std::vector<int32_t> want = ids(line.substr(sp + 1));
    ASSERT_EQ(want.size(), 32u) << key;
    LoadOptions o;
    o.n_threads = 1;  // also under qemu, where spinning workers share the host's cores
    std::unique_ptr<Model> m = load_model(dir + "stories260K-x4-" + key + ".gguf", o);
    EXPECT_EQ(test::greedy(*m, prompt, 32), want) << key;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  EXPECT_EQ(prompt.size(), 16u);
}

}  // namespace
}  // namespace spool
