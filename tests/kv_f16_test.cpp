// The F16 KV cache (LoadOptions::kv_type, --kv-type f16) against references we
// did not write: the tiny fixtures' transformers logits stay within the same
// 1e-3 bound as with the F32 cache (measured 2.6e-4 .. 3.4e-4), the logits
// differ from the F32 cache's (the F16 path is really taken), and greedy
// decoding still gives transformers' greedy ids. MLA keeps an F32 latent cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "runtime/session.h"
#include "test_util.h"

using namespace spool;
using namespace spool::test;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;

class KvF16Logits : public ::testing::TestWithParam<const char*> {};

TEST_P(KvF16Logits, StayNearTransformers) {
  const std::string name = GetParam();
  const auto ref = safetensors::open(kShared + "/fixtures/" + name + "/reference.safetensors");
  LoadOptions lo{2};
  lo.kv_type = DType::F16;
  auto model = load_model(kShared + "/fixtures/gguf/" + name + ".f32.gguf", lo);
  auto f32_model = load_model(kShared + "/fixtures/gguf/" + name + ".f32.gguf", LoadOptions{2});
  const int n_vocab = model->config().n_vocab;
  const std::vector<int32_t> ids = to_i32(ref.read_i64("input_ids"));
  const std::vector<float> want = ref.read_f32("logits");
  Session session(*model, (int)ids.size());
  const std::vector<float> got = session.feed(ids, true);
  Session f32_session(*f32_model, (int)ids.size());
  const std::vector<float> got_f32 = f32_session.feed(ids, true);
  const float err = rel_error(got, want), err_f32 = rel_error(got_f32, want);
  EXPECT_LE(err, 1e-3f) << name << " relative error with an F16 cache " << err << " (F32 cache " << err_f32 << ")";
  EXPECT_NE(got, got_f32) << "the F16 cache gave the F32 cache's logits bit for bit: is it used?";
  RecordProperty("relative_error", std::to_string(err));

  const std::vector<int32_t> prompt = to_i32(ref.read_i64("prompt_ids"));
  const std::vector<int32_t> greedy_ids = to_i32(ref.read_i64("greedy_ids"));
  Session s2(*model, 64);
  const float* logits = s2.feed(prompt).data();
  std::vector<int32_t> out;
  for (size_t i = 0; i < greedy_ids.size(); ++i) {
    out.push_back((int32_t)(std::max_element(logits, logits + n_vocab) - logits));
    logits = s2.feed({out.back()}).data();
  }
  EXPECT_EQ(out, greedy_ids);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvF16Logits, ::testing::Values("llama-tiny", "qwen2-tiny", "qwen3-tiny"));

TEST(KvF16, HalvesTheEstimateAndMlaStaysF32) {
  auto model = load_model(kShared + "/fixtures/gguf/qwen2-tiny.f32.gguf", LoadOptions{2});
  EXPECT_EQ(kv_bytes_estimate(model->config(), 256, DType::F16) * 2, kv_bytes_estimate(model->config(), 256));
  LoadOptions lo{2};
  lo.kv_type = DType::F16;
  auto mla = load_model(kShared + "/fixtures/gguf/deepseek3-tiny.f32.gguf", lo);
  EXPECT_EQ(mla->kv_shape().type, DType::F32);
  lo.kv_type = DType::Q8_0;
  EXPECT_THROW(load_model(kShared + "/fixtures/gguf/qwen2-tiny.f32.gguf", lo), Error);
}

}  // namespace
