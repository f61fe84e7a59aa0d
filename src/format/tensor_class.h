// Tensor classes by GGUF tensor name (token embedding, output, attention,
// dense FFN, routed experts, shared experts, norms, other) and a file's mix
// per class: which types each class uses and its bytes and share of the
// file, as `spool inspect` prints it and the dynamic quant mixes assign types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/manifest.h"

namespace spool {

enum class TensorClass { TokenEmbedding, Output, Attention, DenseFfn, RoutedExperts, SharedExperts, Norms, Other };
inline constexpr int kNumTensorClasses = 8;

// "blk.3.ffn_up_exps.weight" (or one expert's slice of it) -> RoutedExperts,
// "blk.3.attn_kv_a_norm.weight" -> Norms, "blk.3.ffn_gate_inp.weight" -> Other
// (the router), "blk.0.ssm_conv1d.weight" -> Attention (linear attention).
TensorClass tensor_class(const std::string& name);
const char* tensor_class_name(TensorClass c);  // "routed experts"

struct ClassMix {
  TensorClass cls;
  int n_tensors = 0;  // stacked expert tensors count once, not once per slice
  uint64_t bytes = 0;
  std::map<std::string, uint64_t> bytes_by_type;  // dtype name -> bytes
};

// Per class present in the manifest, in TensorClass order.
std::vector<ClassMix> class_mix(const Manifest& m);
// The table `spool inspect` prints: one line per class with its types
// (largest first), bytes and share of all tensor bytes.
std::string describe_class_mix(const std::vector<ClassMix>& mix, uint64_t total_bytes);

}  // namespace spool
