// quantization_config -> QuantConfig: the FP8 block-scaled form and the
// compressed-tensors pack-quantized int4 form, with every field that would
// change the arithmetic checked (anything else is refused by name).
#include "format/hf_quant.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace spool::hf {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& why) { throw Error("config.json: quantization_config: " + why); }

std::string str(const json& j, const char* key, const std::string& def = "") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_string()) fail(std::string("'") + key + "' should be a string");
  return it->get<std::string>();
}

QuantConfig read_fp8(const json& q) {
  QuantConfig c;
  c.method = QuantConfig::Method::Fp8Block;
  const std::string fmt = str(q, "fmt", "e4m3");
  if (fmt != "e4m3") fail("fp8 fmt '" + fmt + "' is not supported (only e4m3)");
  const std::string act = str(q, "activation_scheme", "dynamic");
  if (act != "dynamic") fail("fp8 activation_scheme '" + act + "' is not supported (only dynamic)");
  auto bs = q.find("weight_block_size");
  if (bs == q.end() || !bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
      !(*bs)[1].is_number_integer())
    fail("fp8 needs weight_block_size [rows, cols] (per-tensor FP8 scales are not supported)");
  c.block_rows = (*bs)[0].get<int64_t>();
  c.block_cols = (*bs)[1].get<int64_t>();
  if (c.block_rows <= 0 || c.block_cols <= 0 || c.block_rows > (1 << 20) || c.block_cols > (1 << 20))
    fail("weight_block_size must hold two positive integers");
  return c;
}

// The weights section of every config group must be the same symmetric int4
// group scheme (spool repacks by what each tensor stores, not by targets).
QuantConfig read_compressed_tensors(const json& q) {
  QuantConfig c;
  c.method = QuantConfig::Method::PackQuantized;
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) fail("compressed-tensors needs config_groups");
  for (const auto& [name, g] : groups->items()) {
    const std::string where = "config_groups." + name;
    if (!g.is_object()) fail(where + " should be an object");
    const std::string format = str(g, "format", str(q, "format"));
    if (format != "pack-quantized")
      fail(where + ": format '" + format + "' is not supported (only pack-quantized)");
    auto w = g.find("weights");
    if (w == g.end() || !w->is_object()) fail(where + " has no weights section");
    auto num = [&](const char* key) -> int64_t {
      auto it = w->find(key);
      if (it == w->end() || !it->is_number_integer()) fail(where + ".weights." + key + " should be an integer");
      return it->get<int64_t>();
    };
    if (str(*w, "type", "int") != "int") fail(where + ".weights.type must be int");
    if (num("num_bits") != 4) fail(where + ".weights.num_bits " + std::to_string(num("num_bits")) + " is not supported (only 4)");
    if (!w->value("symmetric", false)) fail(where + ": asymmetric weights (zero points) are not supported");
    if (str(*w, "strategy") != "group") fail(where + ".weights.strategy '" + str(*w, "strategy") + "' is not supported (only group)");
    if (auto a = w->find("actorder"); a != w->end() && !a->is_null() && !(a->is_boolean() && !a->get<bool>()))
      fail(where + ": activation reordering (actorder / g_idx) is not supported");
    const int64_t gs = num("group_size");
    if (gs <= 0 || gs % 32 != 0)
      fail(where + ".weights.group_size " + std::to_string(gs) + " is not supported (a multiple of 32 is)");
    if (c.group_size != 0 && c.group_size != gs) fail("config groups with different group sizes are not supported");
    c.num_bits = 4;
    c.group_size = gs;
  }
  return c;
}

}  // namespace

QuantConfig read_quant_config(const json& config) {
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return {};
  if (!it->is_object()) fail("should be an object");
  const std::string method = str(*it, "quant_method");
  if (method == "fp8") return read_fp8(*it);
  if (method == "compressed-tensors") return read_compressed_tensors(*it);
  fail("quant_method '" + method + "' is not supported (fp8 with weight_block_size, compressed-tensors pack-quantized)");
}

}  // namespace spool::hf
