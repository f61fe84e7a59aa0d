// Tokenizer-only opening (model/tokenizer_file.h): GGUF metadata is read as
// is (vocab-only files have no tensors and often an architecture spool does
// not run); tokenizer.json goes through the same HF-to-GGUF key mapping the
// checkpoint loader uses.
#include "model/tokenizer_file.h"

#include <filesystem>

#include "core/error.h"
#include "model/model.h"
#include "text/hf_tokenizer.h"

namespace spool {

namespace fs = std::filesystem;

bool is_tokenizer_json_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return fs::exists(fs::path(path) / "tokenizer.json", ec) && !fs::exists(fs::path(path) / "config.json", ec);
  return fs::path(path).filename() == "tokenizer.json";
}

gguf::File open_tokenizer_file(const std::string& path) {
  if (!is_tokenizer_json_path(path)) {
    gguf::File f = open_model_file(path);
    if (!f.find("tokenizer.ggml.model") && !f.find("tokenizer.ggml.tokens"))
      throw Error("'" + path + "' holds no tokenizer (no tokenizer.ggml.* metadata)");
    return f;
  }
  std::error_code ec;
  const std::string dir = fs::is_directory(path, ec) ? path : fs::path(path).parent_path().string();
  if (!fs::exists(fs::path(dir.empty() ? "." : dir) / "tokenizer.json", ec))
    throw Error("'" + path + "': no such file");
  gguf::File f;
  add_hf_tokenizer_metadata(dir.empty() ? "." : dir, 0, f);
  return f;
}

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path) {
  const gguf::File f = open_tokenizer_file(path);
  try {
    return load_tokenizer(f);
  } catch (const Error& e) {
    throw Error("'" + path + "': " + e.what());
  }
}

}  // namespace spool
