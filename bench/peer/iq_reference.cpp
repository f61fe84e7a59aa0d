// Writes reference data for spool's low-bit types from the peer (llama.cpp's
// ggml): for each type, a matrix of seeded random weights (src.TYPE), ggml's
// quantization of it (q.TYPE, with a random importance matrix, which the
// IQ1/IQ2 types need) and the floats ggml dequantizes that to (ref.TYPE). spool's test reads both from the GGUF file
// and checks its own dequantization and dot products against them.
// Built and run by bench/peer/make_iq_reference.sh against a llama.cpp tree;
// it is never part of spool's build.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml.h"
#include "gguf.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.gguf\n", argv[0]);
    return 2;
  }
  const ggml_type types[] = {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS,
                             GGML_TYPE_IQ3_S,   GGML_TYPE_IQ1_S,  GGML_TYPE_IQ1_M, GGML_TYPE_IQ4_NL,
                             GGML_TYPE_IQ4_XS,  GGML_TYPE_TQ1_0,  GGML_TYPE_TQ2_0, GGML_TYPE_Q1_0,
                             GGML_TYPE_Q2_0};
  const int64_t n_rows = 8, n_cols = 512;
  const size_t n_types = sizeof types / sizeof types[0];
  ggml_init_params params = {n_types * (n_rows * n_cols * 4 * 3 + 4096) + (1 << 20), nullptr, false};
  ggml_context* ctx = ggml_init(params);
  gguf_context* out = gguf_init_empty();
  gguf_set_val_str(out, "general.description", "spool low-bit type reference: q.TYPE quantized by ggml, ref.TYPE its dequantization");
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> importance(0.1f, 2.0f);
  for (ggml_type type : types) {
    std::vector<float> src(n_rows * n_cols), imatrix(n_cols);
    for (float& v : src) v = normal(rng) * (std::fabs(normal(rng)) > 2.5f ? 4.0f : 1.0f);  // some outliers
    for (float& v : imatrix) v = importance(rng);
    const char* name = ggml_type_name(type);
    ggml_tensor* q = ggml_new_tensor_2d(ctx, type, n_cols, n_rows);
    ggml_set_name(q, (std::string("q.") + name).c_str());
    const size_t bytes = ggml_quantize_chunk(type, src.data(), q->data, 0, n_rows, n_cols, imatrix.data());
    if (bytes != ggml_nbytes(q)) {
      std::fprintf(stderr, "%s: quantized %zu bytes, expected %zu\n", name, bytes, ggml_nbytes(q));
      return 1;
    }
    ggml_tensor* orig = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_cols, n_rows);
    ggml_set_name(orig, (std::string("src.") + name).c_str());
    std::memcpy(orig->data, src.data(), src.size() * sizeof(float));
    ggml_tensor* ref = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_cols, n_rows);
    ggml_set_name(ref, (std::string("ref.") + name).c_str());
    ggml_get_type_traits(type)->to_float(q->data, static_cast<float*>(ref->data), n_rows * n_cols);
    gguf_add_tensor(out, q);
    gguf_add_tensor(out, ref);
    gguf_add_tensor(out, orig);
    std::printf("%-8s %6zu bytes\n", name, bytes);
  }
  if (!gguf_write_to_file(out, argv[1], false)) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  gguf_free(out);
  ggml_free(ctx);
  return 0;
}
