// Helpers shared by the fuzz entry points: the target table, multi-part
// inputs, a per-process scratch directory for file-reading parsers.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fuzz_targets.h"

namespace spool::fuzz {

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"gguf", gguf},
      {"safetensors", safetensors},
      {"hf_config", hf_config},
      {"hf_tokenizer", hf_tokenizer},
      {"jinja", jinja},
      {"openai_request", openai_request},
      {"pipeline_spec", pipeline_spec},
      {"http_range", http_range},
  };
  return all;
}

std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t max_parts) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const std::string sep = kPartSeparator;
  std::vector<std::string> parts;
  size_t begin = 0;
  while (parts.size() + 1 < max_parts) {
    const size_t at = all.find(sep, begin);
    if (at == std::string::npos) break;
    parts.push_back(all.substr(begin, at - begin));
    begin = at + sep.size();
  }
  parts.push_back(all.substr(begin));
  return parts;
}

std::string scratch_dir() {
  // Never destroyed: the exit handler below runs after static destructors may have.
  static const std::string& dir = *new std::string([] {
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path p = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                                    ("spool-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return p.string();
  }());
  return dir;
}

std::string write_scratch_file(const std::string& name, const std::string& content) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), (std::streamsize)content.size());
  return path;
}

void remove_scratch_file(const std::string& name) {
  std::error_code ec;
  std::filesystem::remove(scratch_dir() + "/" + name, ec);
}

std::string shared_dir() {
  const char* env = std::getenv("SPOOL_FUZZ_SHARED");
  return env && *env ? env : "../shared";
}

}  // namespace spool::fuzz
