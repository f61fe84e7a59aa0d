// GGUF export of an opened model (see the header).
#include "format/gguf_export.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "storage/local_file.h"

namespace spool {
namespace {

std::vector<uint8_t> tensor_bytes(const Manifest& m, const TensorEntry& t) {
  if (!t.companion.empty())
    throw Error("tensor '" + t.name + "' is block-scaled (" + dtype_name(t.type) + "), which GGUF export does not write");
  std::vector<uint8_t> out(t.bytes);
  if (t.memory)
    std::memcpy(out.data(), t.memory, t.bytes);
  else
    LocalFile(m.files[t.file]).read(t.offset, t.bytes, out.data());
  return out;
}

}  // namespace

std::vector<float> ExportTensor::f32() const {
  if (type != DType::F32) throw Error("tensor '" + name + "' is " + dtype_name(type) + ", not F32");
  std::vector<float> v(data.size() / 4);
  std::memcpy(v.data(), data.data(), data.size());
  return v;
}

void ExportTensor::set_f32(const std::vector<float>& v) {
  type = DType::F32;
  data.resize(v.size() * 4);
  std::memcpy(data.data(), v.data(), data.size());
}

std::vector<ExportTensor> export_tensors(const gguf::File& file) {
  const Manifest& m = file.manifest;
  std::vector<ExportTensor> out;
  std::map<std::string, std::map<int, const TensorEntry*>> stacks;  // stacked name -> expert -> slice
  for (const TensorEntry& t : m.tensors) {
    const size_t hash = t.name.find('#');
    if (hash != std::string::npos) {
      stacks[t.name.substr(0, hash)][std::stoi(t.name.substr(hash + 1))] = &t;
      continue;
    }
    out.push_back({t.name, t.type, t.shape, tensor_bytes(m, t)});
  }
  for (const auto& [name, experts] : stacks) {
    const TensorEntry& first = *experts.begin()->second;
    ExportTensor s{name, first.type, first.shape, {}};
    s.shape.push_back((int64_t)experts.size());
    int e = 0;
    for (const auto& [index, slice] : experts) {
      if (index != e++ || slice->type != first.type || slice->shape != first.shape)
        throw Error("expert slices of '" + name + "' are not experts 0.." + std::to_string(experts.size() - 1) +
                    " of one type and shape");
      const std::vector<uint8_t> b = tensor_bytes(m, *slice);
      s.data.insert(s.data.end(), b.begin(), b.end());
    }
    out.push_back(std::move(s));
  }
  return out;
}

void write_gguf(const gguf::File& meta, const std::vector<ExportTensor>& tensors, const std::string& path) {
  gguf::Writer w;
  for (const auto& [key, value] : meta.kv) {
    if (key.rfind("spool.", 0) == 0) continue;
    // Metadata synthesized in memory is INT64 / FLOAT64; llama.cpp's converter (and loader) use u32 and f32.
    if (value.type == gguf::ValueType::INT64 && value.i >= 0 && value.i <= 0xffffffffll)
      w.set(key, gguf::Value::of_int(value.i, gguf::ValueType::UINT32));
    else if (value.type == gguf::ValueType::FLOAT64)
      w.set(key, gguf::Value::of_float(value.f, gguf::ValueType::FLOAT32));
    else
      w.set(key, value);
  }
  for (const ExportTensor& t : tensors) w.add_tensor(t.name, t.type, t.shape);
  w.begin(path);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].data.size() != w.tensor_bytes(i))
      throw Error("tensor '" + tensors[i].name + "' holds " + std::to_string(tensors[i].data.size()) +
                  " bytes, its shape needs " + std::to_string(w.tensor_bytes(i)));
    w.write_tensor(i, tensors[i].data.data());
  }
  w.finish();
}

}  // namespace spool
