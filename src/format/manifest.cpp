// Manifest lookups and helpers.
#include "format/manifest.h"

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

uint64_t Manifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes;
  return n;
}

}  // namespace spool
