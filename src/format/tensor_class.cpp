// Tensor classes from GGUF names (llama.cpp's naming: token_embd, output,
// blk.N.attn_* / ssm_*, ffn_* / *_exps / *_shexp, *norm*) and the per-class
// mix of a file.
#include "format/tensor_class.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/dtype.h"

namespace spool {
namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string fmt_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", b / double(1ull << 10));
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)b);
  return buf;
}

// "blk.1.ffn_up_exps.weight#7" -> "blk.1.ffn_up_exps.weight".
std::string stacked_name(const std::string& name) {
  const size_t hash = name.rfind('#');
  return hash == std::string::npos ? name : name.substr(0, hash);
}

}  // namespace

TensorClass tensor_class(const std::string& name) {
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return TensorClass::TokenEmbedding;
  if (name == "output.weight") return TensorClass::Output;
  if (has(name, "norm")) return TensorClass::Norms;
  if (has(name, "_exps")) return TensorClass::RoutedExperts;
  if (has(name, "_shexp")) return TensorClass::SharedExperts;
  if (has(name, "ffn_gate_inp") || has(name, "exp_probs_b")) return TensorClass::Other;  // router
  if (has(name, ".attn_") || has(name, ".ssm_")) return TensorClass::Attention;
  if (has(name, ".ffn_")) return TensorClass::DenseFfn;
  return TensorClass::Other;
}

const char* tensor_class_name(TensorClass c) {
  switch (c) {
    case TensorClass::TokenEmbedding: return "token embedding";
    case TensorClass::Output: return "output";
    case TensorClass::Attention: return "attention";
    case TensorClass::DenseFfn: return "dense FFN";
    case TensorClass::RoutedExperts: return "routed experts";
    case TensorClass::SharedExperts: return "shared experts";
    case TensorClass::Norms: return "norms";
    case TensorClass::Other: return "other";
  }
  return "?";
}

std::vector<ClassMix> class_mix(const Manifest& m) {
  std::vector<ClassMix> all(kNumTensorClasses);
  std::set<std::string> counted;  // stacked expert tensors already counted
  for (int i = 0; i < kNumTensorClasses; ++i) all[i].cls = (TensorClass)i;
  for (const TensorEntry& t : m.tensors) {
    ClassMix& c = all[(int)tensor_class(t.name)];
    if (counted.insert(stacked_name(t.name)).second) ++c.n_tensors;
    c.bytes += t.bytes;
    c.bytes_by_type[dtype_name(t.type)] += t.bytes;
  }
  std::vector<ClassMix> out;
  for (ClassMix& c : all)
    if (c.n_tensors > 0) out.push_back(std::move(c));
  return out;
}

std::string describe_class_mix(const std::vector<ClassMix>& mix, uint64_t total_bytes) {
  std::string out;
  char line[512];
  for (const ClassMix& c : mix) {
    std::vector<std::pair<std::string, uint64_t>> types(c.bytes_by_type.begin(), c.bytes_by_type.end());
    std::stable_sort(types.begin(), types.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string words;
    for (const auto& [type, bytes] : types)
      words += (words.empty() ? "" : ", ") + type + (types.size() > 1 ? " " + fmt_bytes(bytes) : std::string());
    std::snprintf(line, sizeof line, "  %-16s %5d tensors %12s %6.2f%%  %s\n", tensor_class_name(c.cls), c.n_tensors,
                  fmt_bytes(c.bytes).c_str(), total_bytes ? 100.0 * (double)c.bytes / (double)total_bytes : 0.0,
                  words.c_str());
    out += line;
  }
  return out;
}

}  // namespace spool
