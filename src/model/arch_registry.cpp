// The table of supported architectures.
#include "model/arch_registry.h"

#include <utility>

namespace spool {
namespace {
const std::pair<const char*, ModelFactory> kArchs[] = {
    {"llama", make_llama_model},
    {"qwen2", make_qwen2_model},
    {"qwen3", make_qwen3_model},
    {"qwen3moe", make_qwen3moe_model},
    {"deepseek2", make_deepseek2_model},
    {"kimi-linear", make_kimi_linear_model},
    {"kimi-k3", make_kimi_k3_model},
};
}  // namespace

ModelFactory find_arch(const std::string& arch) {
  for (const auto& [name, fn] : kArchs)
    if (arch == name) return fn;
  return nullptr;
}

std::vector<std::string> supported_archs() {
  std::vector<std::string> out;
  for (const auto& a : kArchs) out.push_back(a.first);
  return out;
}

}  // namespace spool
