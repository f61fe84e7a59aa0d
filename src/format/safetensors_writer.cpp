// safetensors writer (F32 only; used by `spool logits`).
#include "format/safetensors_writer.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace spool {

void write_safetensors_f32(const std::string& path, const std::vector<SafetensorsTensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= (uint64_t)d;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + n * 4}}};
    offset += n * 4;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';  // data starts 8-byte aligned
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot write '" + path + "'");
  const uint64_t hlen = h.size();
  bool ok = std::fwrite(&hlen, 8, 1, f) == 1 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (const auto& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= (uint64_t)d;
    ok = ok && std::fwrite(t.data, 4, n, f) == n;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw Error("failed writing '" + path + "'");
}

}  // namespace spool
