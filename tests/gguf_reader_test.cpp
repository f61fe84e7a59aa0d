// GGUF reader: real files from ../shared parse; malformed files (bad magic,
// version 1, truncation, bad types, misalignment, absurd lengths) are refused
// with an error naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;

// Little byte builder for hand-made GGUF files.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T> Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& pad(size_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
};

// Per process: ctest runs tests in parallel processes (and other checkouts may run them too).
fs::path test_dir() { return fs::temp_directory_path() / ("spool-gguf-test-" + std::to_string(getpid())); }

std::string write_temp(const std::string& name, const std::vector<uint8_t>& data) {
  const fs::path dir = test_dir();
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), data.size());
  return path;
}

std::string error_of(const std::string& path) {
  try {
    gguf::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A valid file: every scalar type, a string array, a nested array, one F32 tensor [4, 2].
Bytes valid_file(uint32_t type_id = 0, uint64_t offset = 0, uint64_t ne0 = 4) {
  Bytes f;
  f.b = {'G', 'G', 'U', 'F'};
  f.put<uint32_t>(3).put<uint64_t>(1).put<uint64_t>(15);
  f.str("general.architecture").put<uint32_t>(8).str("llama");
  f.str("u8").put<uint32_t>(0).put<uint8_t>(200);
  f.str("i8").put<uint32_t>(1).put<int8_t>(-100);
  f.str("u16").put<uint32_t>(2).put<uint16_t>(60000);
  f.str("i16").put<uint32_t>(3).put<int16_t>(-30000);
  f.str("u32").put<uint32_t>(4).put<uint32_t>(4000000000u);
  f.str("i32").put<uint32_t>(5).put<int32_t>(-2000000000);
  f.str("f32").put<uint32_t>(6).put<float>(1.5f);
  f.str("bool").put<uint32_t>(7).put<uint8_t>(1);
  f.str("u64").put<uint32_t>(10).put<uint64_t>(18000000000000000000ull);
  f.str("i64").put<uint32_t>(11).put<int64_t>(-9000000000000000000ll);
  f.str("f64").put<uint32_t>(12).put<double>(-2.25);
  f.str("strs").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("a").str("bc");
  f.str("nested").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  f.put<uint32_t>(5).put<uint64_t>(2).put<int32_t>(1).put<int32_t>(2);
  f.put<uint32_t>(6).put<uint64_t>(1).put<float>(3.0f);
  f.str("general.alignment").put<uint32_t>(4).put<uint32_t>(64);
  f.str("t").put<uint32_t>(2).put<uint64_t>(ne0).put<uint64_t>(2).put<uint32_t>(type_id).put<uint64_t>(offset);
  f.pad(64);
  for (int i = 0; i < 8; ++i) f.put<float>((float)i);
  return f;
}

}  // namespace

TEST(GgufReader, ParsesEveryValueType) {
  const gguf::File f = gguf::open(write_temp("valid.gguf", valid_file().b));
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 64u);
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_int("u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_FLOAT_EQ(f.get_float("f32"), 1.5);
  EXPECT_TRUE(f.get_bool("bool", false));
  EXPECT_EQ(f.find("u64")->u, 18000000000000000000ull);
  EXPECT_EQ(f.get_int("i64"), -9000000000000000000ll);
  EXPECT_DOUBLE_EQ(f.get_float("f64"), -2.25);
  EXPECT_EQ(f.get_array("strs").strings, (std::vector<std::string>{"a", "bc"}));
  const gguf::Value& nested = f.get_array("nested");
  ASSERT_EQ(nested.arrays.size(), 2u);
  EXPECT_EQ(nested.arrays[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(nested.arrays[1].floats, (std::vector<double>{3.0}));
  const TensorEntry& t = f.manifest.require("t");
  EXPECT_EQ(t.type, DType::F32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t.bytes, 32u);
  EXPECT_EQ(t.offset % 64, 0u);
  EXPECT_THROW(f.get_string("u8"), Error);  // type mismatch is an error, not garbage
  EXPECT_THROW(f.get_int("missing"), Error);
}

TEST(GgufReader, ReadsStories260K) {
  const gguf::File f = gguf::open(kShared + "/models/stories260K.gguf");
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(f.manifest.tensors.size(), 48u);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").strings.size(), 512u);
}

TEST(GgufReader, RefusesVersion1) {
  const std::string e = error_of(kShared + "/models/tinyllamas-stories-260k-f32.gguf");
  EXPECT_NE(e.find("version 1"), std::string::npos) << e;
}

TEST(GgufReader, RefusesTruncatedFileNamingTheTensor) {
  std::ifstream in(kShared + "/models/stories260K.gguf", std::ios::binary);
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(data.size(), 100000u);
  data.resize(data.size() - 5000);
  const std::string e = error_of(write_temp("truncated.gguf", data));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor '"), std::string::npos) << e;
  // Cut inside the metadata too.
  data.resize(2000);
  EXPECT_NE(error_of(write_temp("truncated2.gguf", data)).find("truncated"), std::string::npos);
}

TEST(GgufReader, RefusesMalformedFiles) {
  Bytes bad_magic = valid_file();
  bad_magic.b[0] = 'X';
  EXPECT_NE(error_of(write_temp("magic.gguf", bad_magic.b)).find("not a GGUF"), std::string::npos);

  std::string e = error_of(write_temp("type.gguf", valid_file(99).b));
  EXPECT_NE(e.find("unsupported tensor type id 99"), std::string::npos) << e;
  EXPECT_NE(e.find("'t'"), std::string::npos) << e;
  e = error_of(write_temp("nvfp4.gguf", valid_file(40).b));  // a ggml type spool does not read yet
  EXPECT_NE(e.find("unsupported tensor type id 40 (NVFP4"), std::string::npos) << e;
  EXPECT_NE(e.find("'t'"), std::string::npos) << e;

  e = error_of(write_temp("align.gguf", valid_file(0, 4).b));
  EXPECT_NE(e.find("not aligned"), std::string::npos) << e;

  e = error_of(write_temp("past.gguf", valid_file(0, 64).b));
  EXPECT_NE(e.find("past the end"), std::string::npos) << e;

  e = error_of(write_temp("block.gguf", valid_file(2, 0, 4).b));  // Q4_0 row of 4 elements
  EXPECT_NE(e.find("block size"), std::string::npos) << e;

  Bytes huge_string;
  huge_string.b = {'G', 'G', 'U', 'F'};
  huge_string.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1).put<uint64_t>(1ull << 60);
  e = error_of(write_temp("string.gguf", huge_string.b));
  EXPECT_NE(e.find("string length"), std::string::npos) << e;

  Bytes absurd_counts;
  absurd_counts.b = {'G', 'G', 'U', 'F'};
  absurd_counts.put<uint32_t>(3).put<uint64_t>(1ull << 40).put<uint64_t>(0);
  EXPECT_NE(error_of(write_temp("counts.gguf", absurd_counts.b)).find("corrupt"), std::string::npos);
}

TEST(GgufReader, OpensSplitModels) {
  // Two shards: tensor "a" in the first, "b" in the second.
  auto shard = [](int no, const std::string& tname) {
    Bytes f;
    f.b = {'G', 'G', 'U', 'F'};
    f.put<uint32_t>(3).put<uint64_t>(1).put<uint64_t>(no == 0 ? 3 : 1);
    f.str("split.no").put<uint32_t>(2).put<uint16_t>((uint16_t)no);
    if (no == 0) {
      f.str("split.count").put<uint32_t>(2).put<uint16_t>(2);
      f.str("general.architecture").put<uint32_t>(8).str("llama");
    }
    f.str(tname).put<uint32_t>(1).put<uint64_t>(8).put<uint32_t>(0).put<uint64_t>(0);
    f.pad(32);
    for (int i = 0; i < 8; ++i) f.put<float>((float)(i + 10 * no));
    return f.b;
  };
  const std::string first = write_temp("m-00001-of-00002.gguf", shard(0, "a"));
  write_temp("m-00002-of-00002.gguf", shard(1, "b"));
  const gguf::File f = gguf::open(first);
  ASSERT_EQ(f.manifest.files.size(), 2u);
  EXPECT_EQ(f.manifest.require("a").file, 0);
  EXPECT_EQ(f.manifest.require("b").file, 1);
  fs::remove(test_dir() / "m-00002-of-00002.gguf");
  EXPECT_NE(error_of(first).find("cannot open"), std::string::npos);
}
