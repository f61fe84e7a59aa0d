// The traits table behind dtype.h: one row per supported type, indexed by
// its GGUF id. vec_dot_type says what activations each weight type is dotted
// with: float weights keep full-precision float activations, the legacy
// types use Q8_0 (or Q8_1 when they carry a minimum), the K-quants Q8_K, and
// the low-bit types what llama.cpp dots them with (Q8_K; Q8_0 for IQ4_NL,
// Q1_0 and Q2_0, whose blocks are multiples of 32).
#include "core/dtype.h"

#include <array>
#include <cctype>

#include "core/error.h"
#include "core/quant_blocks.h"

namespace spool {
namespace {

struct Row {
  DType type;
  DTypeTraits traits;
};

constexpr Row kRows[] = {
    {DType::F32, {"F32", 1, 4, false, DType::F32}},
    {DType::F16, {"F16", 1, 2, false, DType::F32}},
    {DType::BF16, {"BF16", 1, 2, false, DType::F32}},
    {DType::Q4_0, {"Q4_0", kQK, sizeof(BlockQ4_0), true, DType::Q8_0}},
    {DType::Q4_1, {"Q4_1", kQK, sizeof(BlockQ4_1), true, DType::Q8_1}},
    {DType::Q5_0, {"Q5_0", kQK, sizeof(BlockQ5_0), true, DType::Q8_0}},
    {DType::Q5_1, {"Q5_1", kQK, sizeof(BlockQ5_1), true, DType::Q8_1}},
    {DType::Q8_0, {"Q8_0", kQK, sizeof(BlockQ8_0), true, DType::Q8_0}},
    {DType::Q8_1, {"Q8_1", kQK, sizeof(BlockQ8_1), true, DType::Q8_1}},
    {DType::Q2_K, {"Q2_K", kQKK, sizeof(BlockQ2_K), true, DType::Q8_K}},
    {DType::Q3_K, {"Q3_K", kQKK, sizeof(BlockQ3_K), true, DType::Q8_K}},
    {DType::Q4_K, {"Q4_K", kQKK, sizeof(BlockQ4_K), true, DType::Q8_K}},
    {DType::Q5_K, {"Q5_K", kQKK, sizeof(BlockQ5_K), true, DType::Q8_K}},
    {DType::Q6_K, {"Q6_K", kQKK, sizeof(BlockQ6_K), true, DType::Q8_K}},
    {DType::Q8_K, {"Q8_K", kQKK, sizeof(BlockQ8_K), true, DType::Q8_K}},
    {DType::MXFP4, {"MXFP4", kQK, sizeof(BlockMXFP4), true, DType::Q8_0}},
    {DType::IQ2_XXS, {"IQ2_XXS", kQKK, sizeof(BlockIQ2_XXS), true, DType::Q8_K}},
    {DType::IQ2_XS, {"IQ2_XS", kQKK, sizeof(BlockIQ2_XS), true, DType::Q8_K}},
    {DType::IQ2_S, {"IQ2_S", kQKK, sizeof(BlockIQ2_S), true, DType::Q8_K}},
    {DType::IQ3_XXS, {"IQ3_XXS", kQKK, sizeof(BlockIQ3_XXS), true, DType::Q8_K}},
    {DType::IQ3_S, {"IQ3_S", kQKK, sizeof(BlockIQ3_S), true, DType::Q8_K}},
    {DType::IQ1_S, {"IQ1_S", kQKK, sizeof(BlockIQ1_S), true, DType::Q8_K}},
    {DType::IQ1_M, {"IQ1_M", kQKK, sizeof(BlockIQ1_M), true, DType::Q8_K}},
    {DType::IQ4_NL, {"IQ4_NL", kQK4NL, sizeof(BlockIQ4_NL), true, DType::Q8_0}},
    {DType::IQ4_XS, {"IQ4_XS", kQKK, sizeof(BlockIQ4_XS), true, DType::Q8_K}},
    {DType::TQ1_0, {"TQ1_0", kQKK, sizeof(BlockTQ1_0), true, DType::Q8_K}},
    {DType::TQ2_0, {"TQ2_0", kQKK, sizeof(BlockTQ2_0), true, DType::Q8_K}},
    {DType::Q1_0, {"Q1_0", kQK1_0, sizeof(BlockQ1_0), true, DType::Q8_0}},
    {DType::Q2_0, {"Q2_0", kQK2_0, sizeof(BlockQ2_0), true, DType::Q8_0}},
    {DType::F8_E4M3, {"F8_E4M3", 1, 1, false, DType::F32}},  // block-scaled: see MatView
};

constexpr int kMaxId = kNumDTypeIds;

constexpr std::array<const DTypeTraits*, kMaxId> build_index() {
  std::array<const DTypeTraits*, kMaxId> index{};
  for (const Row& r : kRows) index[(uint32_t)r.type] = &r.traits;
  return index;
}

constexpr std::array<const DTypeTraits*, kMaxId> kIndex = build_index();

bool equal_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper((unsigned char)a[i]) != std::toupper((unsigned char)b[i])) return false;
  }
  return true;
}

}  // namespace

const DTypeTraits* find_dtype_traits(uint32_t ggml_type) {
  return ggml_type < kFirstSpoolType ? kIndex[ggml_type] : nullptr;
}

const DTypeTraits& dtype_traits(DType t) {
  const DTypeTraits* tr = (uint32_t)t < kMaxId ? kIndex[(uint32_t)t] : nullptr;
  SPOOL_CHECK(tr != nullptr);
  return *tr;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const Row& r : kRows) {
    if (equal_ignore_case(name, r.traits.name)) return r.type;
  }
  return std::nullopt;
}

}  // namespace spool
