// The MODEL.sums sidecar: writing it (one sequential pass over the tensors)
// and reading it back for the streaming store (checksums.h).
#include "weights/checksums.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "storage/storage.h"

namespace spool {

using json = nlohmann::json;

uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes 32-bit lengths (crc32_z is not in every zlib)
    const uInt chunk = (uInt)std::min<size_t>(n, 1u << 30);
    crc = (uint32_t)crc32(crc, p, chunk);
    p += chunk, n -= chunk;
  }
  return crc;
}

std::string checksums_path(const std::string& model_file) { return model_file + ".sums"; }

uint64_t write_checksums(const Manifest& m, const std::string& out_path) {
  StorageOptions so;
  so.direct = false;  // any offset and length; one pass, sequential
  std::vector<std::unique_ptr<Storage>> files;
  for (const std::string& f : m.files) files.push_back(open_storage(f, so));
  std::vector<const TensorEntry*> order;
  for (const TensorEntry& t : m.tensors)
    if (t.file >= 0 && !t.memory) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->file != b->file ? a->file < b->file : a->offset < b->offset;
  });
  json tensors = json::object();
  std::vector<uint8_t> buf(8u << 20);
  uint64_t total = 0;
  for (const TensorEntry* t : order) {
    uint32_t crc = 0;
    for (uint64_t done = 0; done < t->bytes;) {
      const size_t n = (size_t)std::min<uint64_t>(buf.size(), t->bytes - done);
      files[t->file]->read_unaligned(t->offset + done, n, buf.data());
      crc = crc32_of(buf.data(), n, crc);
      done += n;
    }
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", crc);
    tensors[t->name] = hex;
    total += t->bytes;
  }
  json files_json = json::array();
  for (size_t k = 0; k < m.files.size(); ++k)
    files_json.push_back({{"name", std::filesystem::path(m.files[k]).filename().string()}, {"size", m.file_sizes[k]}});
  const json doc = {{"format", "spool-checksums"}, {"version", 1}, {"algorithm", "crc32"},
                    {"files", files_json}, {"tensors", tensors}};
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write '" + tmp + "'");
    out << doc.dump(1) << "\n";
    if (!out.flush()) throw Error("cannot write '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) throw Error("cannot rename '" + tmp + "' to '" + out_path + "': " + ec.message());
  return total;
}

TensorChecksums load_checksums_for(const Manifest& m) {
  TensorChecksums out;
  if (m.files.empty()) return out;
  const std::string path = checksums_path(m.files[0]);
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;  // no sidecar (or a URL): nothing to check against
  json doc;
  try {
    doc = json::parse(in);
  } catch (const std::exception& e) {
    throw Error("checksum file '" + path + "' is not valid JSON: " + e.what() + " (delete it or rerun `spool checksum`)");
  }
  auto bad = [&](const std::string& why) {
    return Error("checksum file '" + path + "' " + why + " (rerun `spool checksum` for this model, or delete it)");
  };
  if (!doc.is_object() || doc.value("format", "") != "spool-checksums" || doc.value("algorithm", "") != "crc32")
    throw bad("is not a spool crc32 checksum file");
  const json& files = doc["files"];
  if (!files.is_array() || files.size() != m.files.size()) throw bad("lists another number of files");
  for (size_t k = 0; k < m.files.size(); ++k) {
    if (!files[k].is_object() || !files[k].contains("size") || !files[k]["size"].is_number_unsigned())
      throw bad("has a malformed file entry");
    if (files[k]["size"].get<uint64_t>() != m.file_sizes[k])
      throw bad("was made for a file of " + std::to_string(files[k]["size"].get<uint64_t>()) + " bytes; '" +
                m.files[k] + "' has " + std::to_string(m.file_sizes[k]));
  }
  const json& tensors = doc["tensors"];
  if (!tensors.is_object()) throw bad("has no tensor table");
  for (const TensorEntry& t : m.tensors) {
    if (t.file < 0 || t.memory) continue;
    auto it = tensors.find(t.name);
    if (it == tensors.end() || !it->is_string() || it->get<std::string>().size() != 8)
      throw bad("has no checksum for tensor '" + t.name + "'");
    const std::string hex = it->get<std::string>();
    if (hex.find_first_not_of("0123456789abcdef") != std::string::npos) throw bad("has a malformed checksum for '" + t.name + "'");
    out.crc[t.name] = (uint32_t)std::stoul(hex, nullptr, 16);
  }
  out.path = path;
  return out;
}

}  // namespace spool
