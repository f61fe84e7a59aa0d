// Architecture name (GGUF general.architecture) -> model constructor.
// Adding an architecture: one arch_*.cpp file with its forward(), one line here
// and one row in arch_registry.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace spool {

std::unique_ptr<Model> make_llama_model(ModelParts parts);
std::unique_ptr<Model> make_qwen2_model(ModelParts parts);
std::unique_ptr<Model> make_qwen3_model(ModelParts parts);
std::unique_ptr<Model> make_qwen3moe_model(ModelParts parts);
std::unique_ptr<Model> make_deepseek2_model(ModelParts parts);
std::unique_ptr<Model> make_kimi_linear_model(ModelParts parts);
std::unique_ptr<Model> make_kimi_k3_model(ModelParts parts);

// nullptr if the architecture is unknown.
using ModelFactory = std::unique_ptr<Model> (*)(ModelParts);
ModelFactory find_arch(const std::string& arch);
std::vector<std::string> supported_archs();

}  // namespace spool
