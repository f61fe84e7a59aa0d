// GGUF writer round trips through the reader (every value type, nested
// arrays, alignment, tensor bytes), and synthetic models: llama.cpp's Q4_K_M
// rules, determinism across thread counts, and a finite forward pass for
// several types through spool::load_model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "runtime/session.h"
#include "synth/synth.h"
#include "synth/synth_quant_mix.h"

namespace spool {
namespace {

namespace fs = std::filesystem;
const std::string kShared = SPOOL_SHARED_DIR;

// A scratch directory for this test binary, removed when it exits.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    path = (fs::temp_directory_path() / "spool-writer-test-XXXXXX").string();
    if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string temp_dir() {
  static ScratchDir dir;
  return dir.path;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (uint8_t)(i * 31 + salt + (i >> 8));
  return v;
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensorData) {
  using namespace gguf;
  const std::string path = temp_dir() + "/all_types.gguf";
  Writer w;
  w.set("general.alignment", value_u32(64));
  w.set("t.u8", value_u8(250));
  w.set("t.i8", value_i8(-120));
  w.set("t.u16", value_u16(65000));
  w.set("t.i16", value_i16(-32000));
  w.set("t.u32", value_u32(4000000000u));
  w.set("t.i32", value_i32(-2000000000));
  w.set("t.u64", value_u64(18000000000000000000ull));
  w.set("t.i64", value_i64(-9000000000000000000ll));
  w.set("t.f32", value_f32(3.25f));
  w.set("t.f64", value_f64(-1.0e-300));
  w.set("t.bool", value_bool(true));
  w.set("t.str", value_string("héllo \"world\""));
  w.set("t.empty_str", value_string(""));
  w.set("t.arr_i32", value_int_array(ValueType::INT32, {-1, 0, 2147483647}));
  w.set("t.arr_u8", value_int_array(ValueType::UINT8, {0, 255}));
  w.set("t.arr_bool", value_int_array(ValueType::BOOL, {1, 0, 1}));
  w.set("t.arr_f32", value_float_array(ValueType::FLOAT32, {0.5, -2.0}));
  w.set("t.arr_f64", value_float_array(ValueType::FLOAT64, {1e100}));
  w.set("t.arr_str", value_string_array({"a", "", "ccc"}));
  w.set("t.arr_empty", value_int_array(ValueType::INT64, {}));
  w.set("t.arr_nested", value_array_array({value_int_array(ValueType::INT16, {1, -2}), value_string_array({"x"})}));
  w.set("t.u8", value_u8(251));  // replacing keeps one entry
  const std::vector<uint8_t> a = pattern(4 * 3, 1), b = pattern(34 * 2, 2), c = pattern(4 * 7, 3);
  w.add_tensor("a", DType::F32, {3});          // 12 bytes: padding follows
  w.add_tensor("b", DType::Q8_0, {32, 2});     // 68 bytes
  w.add_tensor("c", DType::F32, {7, 1, 1, 1});
  const uint64_t planned = w.header_bytes() + w.data_bytes();  // known before writing
  w.begin(path);
  w.write_tensor(0, a.data());
  w.write_tensor(1, b.data());
  w.write_tensor_rows(2, [&](int64_t row0, int64_t n, void* dst) { std::memcpy(dst, c.data() + row0 * 28, n * 28); },
                      nullptr);
  w.finish();

  const File f = open(path);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 64u);
  EXPECT_EQ(f.kv.size(), 22u);
  EXPECT_EQ(f.find("t.u8")->u, 251u);
  EXPECT_EQ(f.find("t.i8")->i, -120);
  EXPECT_EQ(f.find("t.u16")->u, 65000u);
  EXPECT_EQ(f.find("t.i16")->i, -32000);
  EXPECT_EQ(f.find("t.u32")->u, 4000000000u);
  EXPECT_EQ(f.find("t.i32")->i, -2000000000);
  EXPECT_EQ(f.find("t.u64")->u, 18000000000000000000ull);
  EXPECT_EQ(f.find("t.i64")->i, -9000000000000000000ll);
  EXPECT_EQ(f.find("t.f32")->f, 3.25);
  EXPECT_EQ(f.find("t.f32")->type, ValueType::FLOAT32);
  EXPECT_EQ(f.find("t.f64")->f, -1.0e-300);
  EXPECT_TRUE(f.get_bool("t.bool", false));
  EXPECT_EQ(f.get_string("t.str"), "héllo \"world\"");
  EXPECT_EQ(f.get_string("t.empty_str"), "");
  EXPECT_EQ(f.find("t.arr_i32")->ints, (std::vector<int64_t>{-1, 0, 2147483647}));
  EXPECT_EQ(f.find("t.arr_i32")->elem_type, ValueType::INT32);
  EXPECT_EQ(f.find("t.arr_u8")->ints, (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f.find("t.arr_bool")->ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.find("t.arr_f32")->floats, (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(f.find("t.arr_f64")->floats, (std::vector<double>{1e100}));
  EXPECT_EQ(f.find("t.arr_str")->strings, (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.find("t.arr_empty")->array_size(), 0u);
  const Value& nested = *f.find("t.arr_nested");
  ASSERT_EQ(nested.arrays.size(), 2u);
  EXPECT_EQ(nested.arrays[0].ints, (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(nested.arrays[1].strings, (std::vector<std::string>{"x"}));

  const std::string bytes = slurp(path);
  const std::vector<std::pair<std::string, const std::vector<uint8_t>*>> want = {{"a", &a}, {"b", &b}, {"c", &c}};
  for (const auto& [name, data] : want) {
    const TensorEntry& t = f.manifest.require(name);
    EXPECT_EQ(t.offset % 64, 0u) << name;
    ASSERT_EQ(t.bytes, data->size()) << name;
    EXPECT_EQ(std::memcmp(bytes.data() + t.offset, data->data(), data->size()), 0) << name;
  }
  EXPECT_EQ(f.manifest.require("c").shape, (std::vector<int64_t>{7, 1, 1, 1}));
  EXPECT_EQ(f.manifest.require("b").type, DType::Q8_0);
  EXPECT_EQ(bytes.size() % 64, 0u);  // the last tensor is padded too
  EXPECT_EQ(bytes.size(), planned);
}

TEST(GgufWriter, ParallelRowsMatchSerialRows) {
  const std::vector<uint8_t> data = pattern(4 * 1000 * 513, 7);  // rows not a multiple of any chunk
  auto write = [&](const std::string& path, ThreadPool* pool) {
    gguf::Writer w;
    w.add_tensor("big", DType::F32, {1000, 513});
    w.begin(path);
    w.write_tensor_rows(0, [&](int64_t r0, int64_t n, void* dst) { std::memcpy(dst, data.data() + r0 * 4000, n * 4000); },
                        pool);
    w.finish();
  };
  ThreadPool pool(3);
  write(temp_dir() + "/serial.gguf", nullptr);
  write(temp_dir() + "/parallel.gguf", &pool);
  EXPECT_EQ(slurp(temp_dir() + "/serial.gguf"), slurp(temp_dir() + "/parallel.gguf"));
}

TEST(GgufWriter, RefusesMisuseAndLeavesNoPartialFile) {
  const std::string path = temp_dir() + "/misuse.gguf";
  {
    gguf::Writer w;
    EXPECT_THROW(w.add_tensor("bad", DType::Q4_0, {33}), Error);  // not a block multiple
    w.add_tensor("x", DType::F32, {4});
    w.add_tensor("y", DType::F32, {4});
    EXPECT_THROW(w.add_tensor("x", DType::F32, {4}), Error);
    w.begin(path);
    EXPECT_THROW(w.set("late", gguf::value_u32(1)), Error);
    const float v[4] = {1, 2, 3, 4};
    EXPECT_THROW(w.write_tensor(1, v), Error);  // out of order
    w.write_tensor(0, v);
    EXPECT_THROW(w.finish(), Error);  // y never written
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".part"));
}

TEST(SynthQuantMix, FollowsLlamaCppQ4KMRules) {
  const QuantRecipe* r = find_quant_recipe("q4_k_m");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->file_type, 15);
  auto type = [&](const std::string& name, int layer, int64_t row = 2048, bool tied = false) {
    return tensor_dtype(*r, TensorRole{name, row, 2, layer, 22, tied});
  };
  EXPECT_EQ(type("output.weight", -1), DType::Q6_K);
  EXPECT_EQ(type("token_embd.weight", -1), DType::Q4_K);
  EXPECT_EQ(type("token_embd.weight", -1, 2048, true), DType::Q6_K);
  // use_more_bits over 22 layers: 0, 1, 4, 7, 10, 13, 16, 19, 20, 21.
  for (int l : {0, 1, 4, 7, 10, 13, 16, 19, 20, 21}) {
    EXPECT_EQ(type("blk." + std::to_string(l) + ".attn_v.weight", l), DType::Q6_K) << l;
    EXPECT_EQ(type("blk." + std::to_string(l) + ".ffn_down.weight", l, 5632), DType::Q6_K) << l;
  }
  for (int l : {2, 3, 5, 18}) EXPECT_EQ(type("blk." + std::to_string(l) + ".attn_v.weight", l), DType::Q4_K) << l;
  EXPECT_EQ(type("blk.0.attn_q.weight", 0), DType::Q4_K);
  EXPECT_EQ(type("blk.0.ffn_gate.weight", 0), DType::Q4_K);
  EXPECT_EQ(type("blk.2.attn_q.weight", 2, 896), DType::Q5_0);  // llama.cpp's fallback for 896-wide rows
  EXPECT_EQ(tensor_dtype(*r, TensorRole{"blk.0.attn_norm.weight", 2048, 1, 0, 22}), DType::F32);
  EXPECT_STREQ(file_type_name(15), "Q4_K - Medium");
  EXPECT_EQ(find_quant_recipe("Q9_9"), nullptr);
}

SynthResult synth_tiny(const std::string& arch, const std::string& type, int n_threads, const std::string& name) {
  SynthOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.type = type;
  o.out = temp_dir() + "/" + name;
  o.vocab_from = kShared + "/models/llama-2-tiny-random.gguf";
  o.seed = 7;
  o.n_threads = n_threads;
  return synth_model(o);
}

TEST(Synth, IsDeterministicAcrossThreadCounts) {
  synth_tiny("llama", "Q8_0", 1, "det1.gguf");
  synth_tiny("llama", "Q8_0", 2, "det2.gguf");
  EXPECT_EQ(slurp(temp_dir() + "/det1.gguf"), slurp(temp_dir() + "/det2.gguf"));
}

// Loads a synthetic model and checks a prompt's logits are finite and not all equal.
void expect_finite_forward(const std::string& path) {
  LoadOptions lo;
  lo.n_threads = 2;
  auto model = load_model(path, lo);
  EXPECT_EQ(model->config().n_embd, 256);
  EXPECT_EQ(model->config().n_vocab, 32000);
  Session session(*model, 32, 32);
  const std::vector<float>& logits = session.feed({1, 450, 4996, 17354, 1701, 29916}, true);
  ASSERT_EQ(logits.size(), 6u * 32000);
  float lo_v = logits[0], hi_v = logits[0];
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x)) << path;
    lo_v = std::min(lo_v, x);
    hi_v = std::max(hi_v, x);
  }
  EXPECT_GT(hi_v - lo_v, 0.1f) << path;
}

TEST(Synth, TinyModelsOfSeveralTypesRunForward) {
  for (const char* type : {"F32", "F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K"}) {
    SCOPED_TRACE(type);
    const SynthResult r = synth_tiny("llama", type, 2, std::string("tiny-") + type + ".gguf");
    const gguf::File f = gguf::open(r.path);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f.get_int("general.file_type"), find_quant_recipe(type)->file_type);
    expect_finite_forward(r.path);
  }
}

TEST(Synth, TinyQwenModelsRunForward) {
  for (const char* arch : {"qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    const SynthResult r = synth_tiny(arch, "Q8_0", 2, std::string("tiny-") + arch + ".gguf");
    const gguf::File f = gguf::open(r.path);
    EXPECT_EQ(f.architecture(), arch);
    EXPECT_EQ(f.manifest.find("blk.0.attn_q.bias") != nullptr, std::string(arch) == "qwen2");
    EXPECT_EQ(f.manifest.find("blk.0.attn_q_norm.weight") != nullptr, std::string(arch) == "qwen3");
    expect_finite_forward(r.path);
  }
}

TEST(Synth, RefusesBadOptions) {
  SynthOptions o;
  o.out = temp_dir() + "/bad.gguf";
  o.preset = "no-such-preset";
  EXPECT_THROW(synth_model(o), Error);
  o.preset = "tinyllama-1.1b";
  o.arch = "qwen3";  // preset is llama
  EXPECT_THROW(synth_model(o), Error);
  o.arch = "";
  o.type = "Q9_9";
  EXPECT_THROW(synth_model(o), Error);
  EXPECT_FALSE(fs::exists(o.out));
}

}  // namespace
}  // namespace spool
