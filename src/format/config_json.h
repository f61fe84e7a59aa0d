// Typed reads of config.json keys, shared by the Hugging Face config readers
// (hf_config.cpp, hf_config_kimi.cpp): a missing or mistyped key is a
// spool::Error that names it ("config.json: missing 'hidden_size'").
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace spool::hf::config_json {

[[noreturn]] void fail(const std::string& why);

// The value of a key, or nullptr when it is absent or null.
const nlohmann::json* field(const nlohmann::json& j, const char* key);

// A number; the default when the key is absent or null (else required).
double number(const nlohmann::json& j, const char* key);
double number(const nlohmann::json& j, const char* key, double def);

// A non-negative integer (4 or 4.0); the default when absent or null (else required).
int64_t integer(const nlohmann::json& j, const char* key);
int64_t integer(const nlohmann::json& j, const char* key, int64_t def);

}  // namespace spool::hf::config_json
