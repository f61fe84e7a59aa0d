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

void Manifest::add_in_memory(TensorEntry entry, std::vector<uint8_t> data) {
  auto buf = std::make_shared<const std::vector<uint8_t>>(std::move(data));
  entry.file = -1;
  entry.offset = 0;
  entry.bytes = buf->size();
  entry.memory = buf->data();
  add(std::move(entry));
  buffers_.push_back(std::move(buf));
}

uint64_t Manifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes;
  return n;
}

}  // namespace spool
