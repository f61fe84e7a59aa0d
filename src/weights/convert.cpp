// Conversion of matmul weights at load (see convert.h): each tensor's rows are
// expanded to float (block scales applied for F8_E4M3) and quantized to the
// target type, in parallel over rows; the result replaces the manifest entry.
#include "weights/convert.h"

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "storage/local_file.h"

namespace spool {
namespace {

bool is_router_or_scale(const TensorEntry& t) {
  return t.name.find("ffn_gate_inp") != std::string::npos || t.name.find(".scale") != std::string::npos;
}

// Tensor bytes: mapped from its file or held by the manifest.
const uint8_t* tensor_bytes(const TensorEntry& t, std::vector<std::unique_ptr<MappedFile>>& maps,
                            const Manifest& m) {
  if (t.memory) return static_cast<const uint8_t*>(t.memory);
  if (!maps[t.file]) maps[t.file] = std::make_unique<MappedFile>(m.files[t.file]);
  return maps[t.file]->data() + t.offset;
}

}  // namespace

void check_convert_target(DType to) {
  const KernelTable& k = kernels();
  if (to == DType::F8_E4M3 || !k[to].quantize || !k[to].vec_dot)
    throw Error(std::string("cannot convert weights to ") + dtype_name(to) + " (try q8_0, q4_0, f16)");
}

ConvertStats convert_matmul_weights(Manifest& m, DType to, ThreadPool* pool) {
  check_convert_target(to);
  const KernelTable& k = kernels();
  const int64_t block = dtype_traits(to).block_size;
  std::vector<std::unique_ptr<MappedFile>> maps(m.files.size());
  ConvertStats st;
  std::vector<std::string> names;
  for (const TensorEntry& t : m.tensors)
    if (t.shape.size() == 2 && !is_router_or_scale(t) && t.type != to) names.push_back(t.name);
  for (const std::string& name : names) {
    const TensorEntry& t = m.require(name);
    const int64_t n_cols = t.shape[0], n_rows = t.shape[1];
    if (n_cols % block != 0 || (!t.companion.empty() && !k[t.type].scaled.dequantize) ||
        (t.companion.empty() && !k[t.type].dequantize)) {
      ++st.n_kept;
      continue;
    }
    const uint8_t* src = tensor_bytes(t, maps, m);
    const float* scales = nullptr;
    int64_t scale_cols = 0;
    if (!t.companion.empty()) {
      const TensorEntry& s = m.require(t.companion);
      scales = reinterpret_cast<const float*>(tensor_bytes(s, maps, m));
      scale_cols = (n_cols + t.block_cols - 1) / t.block_cols;
    }
    const size_t in_stride = row_bytes(t.type, n_cols), out_stride = row_bytes(to, n_cols);
    std::vector<uint8_t> out(out_stride * n_rows);
    auto convert_rows = [&](int64_t chunk, int) {
      std::vector<float> row(n_cols);
      for (int64_t r = chunk * 64; r < std::min(n_rows, (chunk + 1) * 64); ++r) {
        if (scales) {
          k[t.type].scaled.dequantize(n_cols, src + r * in_stride, scales + (r / t.block_rows) * scale_cols,
                                      t.block_cols, row.data());
        } else {
          k[t.type].dequantize(src + r * in_stride, row.data(), n_cols);
        }
        k[to].quantize(row.data(), out.data() + r * out_stride, n_cols);
      }
    };
    const int64_t n_chunks = (n_rows + 63) / 64;
    if (pool) {
      pool->run(n_chunks, convert_rows);
    } else {
      for (int64_t c = 0; c < n_chunks; ++c) convert_rows(c, 0);
    }
    ++st.n_converted;
    st.bytes_before += t.bytes;
    st.bytes_after += out.size();
    m.replace_in_memory(name, to, std::move(out));
  }
  return st;
}

}  // namespace spool
