// safetensors writer.
#include "format/safetensors_writer.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/safetensors.h"

namespace spool {

void write_safetensors(const std::string& path, const std::vector<SafetensorsRaw>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const size_t es = safetensors::dtype_size(t.dtype);
    if (!es) throw Error("cannot write tensor '" + t.name + "': unknown safetensors dtype " + t.dtype);
    uint64_t n = es;
    for (int64_t d : t.shape) n *= (uint64_t)d;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    sizes.push_back(n);
    offset += n;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';  // data starts 8-byte aligned
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot write '" + path + "'");
  const uint64_t hlen = h.size();
  bool ok = std::fwrite(&hlen, 8, 1, f) == 1 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (size_t k = 0; k < tensors.size(); ++k) ok = ok && std::fwrite(tensors[k].data, 1, sizes[k], f) == sizes[k];
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw Error("failed writing '" + path + "'");
}

void write_safetensors_f32(const std::string& path, const std::vector<SafetensorsTensor>& tensors) {
  std::vector<SafetensorsRaw> raw;
  for (const auto& t : tensors) raw.push_back({t.name, "F32", t.shape, t.data});
  write_safetensors(path, raw);
}

}  // namespace spool
