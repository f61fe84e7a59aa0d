// Manifest lookups and helpers.
#include "format/manifest.h"

#include <regex>

#include "core/error.h"

namespace spool {

std::string TensorEntry::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const TensorEntry& Manifest::require(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (!e) throw Error("model is missing tensor '" + name + "'");
  return *e;
}

void Manifest::add(TensorEntry entry) {
  if (index_.count(entry.name)) throw Error("duplicate tensor name '" + entry.name + "'");
  index_[entry.name] = tensors.size();
  tensors.push_back(std::move(entry));
}

void Manifest::add_in_memory(TensorEntry entry, std::vector<uint8_t> data) {
  auto buf = std::make_shared<const std::vector<uint8_t>>(std::move(data));
  entry.file = -1;
  entry.offset = 0;
  entry.bytes = buf->size();
  entry.memory = buf->data();
  add(std::move(entry));
  buffers_.push_back(std::move(buf));
}

void Manifest::replace_in_memory(const std::string& name, DType type, std::vector<uint8_t> data) {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error("model is missing tensor '" + name + "'");
  auto buf = std::make_shared<const std::vector<uint8_t>>(std::move(data));
  TensorEntry& t = tensors[it->second];
  t.type = type;
  t.file = -1;
  t.offset = 0;
  t.bytes = buf->size();
  t.memory = buf->data();
  t.companion.clear();
  t.block_rows = t.block_cols = 0;
  buffers_.push_back(std::move(buf));
}

std::string expert_slice_name(const std::string& stacked, int expert) {
  return stacked + "#" + std::to_string(expert);
}

static bool is_stacked_experts(const TensorEntry& t) {
  const std::string suffix = "_exps.weight";
  return t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Early Mixtral GGUFs store each expert apart: "blk.N.ffn_gate.E.weight".
// Returns its slice name ("blk.N.ffn_gate_exps.weight#E") and sets `expert`,
// or "" for any other name.
static std::string legacy_expert_name(const std::string& name, int* expert) {
  static const std::regex re(R"((blk\.\d+\.ffn_(gate|up|down))\.(\d{1,6})\.weight)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return "";
  *expert = std::stoi(m[3].str());
  return expert_slice_name(m[1].str() + "_exps.weight", *expert);
}

void split_expert_tensors(Manifest& m) {
  std::vector<TensorEntry> old = std::move(m.tensors);
  m.tensors.clear();
  m.index_.clear();
  for (TensorEntry& t : old) {
    if (std::string slice = legacy_expert_name(t.name, &t.expert); !slice.empty()) t.name = slice;
    if (!is_stacked_experts(t)) {
      m.add(std::move(t));
      continue;
    }
    if (t.shape.size() != 3 || t.shape[2] <= 0 || t.bytes % t.shape[2] != 0)
      throw Error("stacked expert tensor '" + t.name + "' has shape " + t.shape_string() +
                  ", expected [n_cols, n_rows, n_expert]");
    const int n_expert = (int)t.shape[2];
    const uint64_t per_expert = t.bytes / n_expert;
    for (int e = 0; e < n_expert; ++e) {
      TensorEntry s = t;
      s.name = expert_slice_name(t.name, e);
      s.shape = {t.shape[0], t.shape[1]};
      s.offset = t.offset + e * per_expert;
      s.bytes = per_expert;
      if (t.memory) s.memory = static_cast<const uint8_t*>(t.memory) + e * per_expert;
      s.expert = e;
      m.add(std::move(s));
    }
  }
}

uint64_t Manifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes;
  return n;
}

}  // namespace spool
