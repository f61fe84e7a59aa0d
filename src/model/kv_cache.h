// KV cache interface. Attention reads a sequence's keys and values through a
// block table (KvSeqView): the simple cache here gives each sequence one block
// of n_ctx positions; the paged cache (serving) gives many fixed-size blocks
// shared between sequences. K/V rows are [n_head_kv * head_dim] elements, F32
// or F16 (KvShape::type; F16 halves the cache and the bytes attention reads). MLA
// models store one row [kv_lora_rank + rope dims] per token (n_head_kv 1, the
// compressed latent then the rope key) and no V row (head_dim_v 0).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "model/recurrent_state.h"

namespace spool {

struct KvShape {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  DType type = DType::F32;  // element type of the cached rows: F32 or F16
  // Hybrid models: per-sequence recurrent state of the linear-attention layers
  // (model/recurrent_state.h), held beside the KV rows; empty otherwise.
  RecurrentShape recurrent;
  int k_row() const { return n_head_kv * head_dim_k; }
  int v_row() const { return n_head_kv * head_dim_v; }
  size_t elem_bytes() const { return type == DType::F16 ? 2 : 4; }
};

// Block table of one sequence and layer. Rows are k_row / v_row elements of
// `elem_bytes` each; k()/v() give F32 rows, k16()/v16() F16 rows (IEEE half).
struct KvSeqView {
  int block_size = 0;
  int k_row = 0, v_row = 0;
  size_t elem_bytes = sizeof(float);
  std::vector<uint8_t*> k_blocks, v_blocks;
  uint8_t* k_bytes(int pos) const { return k_blocks[pos / block_size] + (size_t)(pos % block_size) * k_row * elem_bytes; }
  uint8_t* v_bytes(int pos) const { return v_blocks[pos / block_size] + (size_t)(pos % block_size) * v_row * elem_bytes; }
  float* k(int pos) const { return reinterpret_cast<float*>(k_bytes(pos)); }
  float* v(int pos) const { return reinterpret_cast<float*>(v_bytes(pos)); }
  uint16_t* k16(int pos) const { return reinterpret_cast<uint16_t*>(k_bytes(pos)); }
  uint16_t* v16(int pos) const { return reinterpret_cast<uint16_t*>(v_bytes(pos)); }
};

class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual const KvShape& shape() const = 0;
  // Maximum number of positions one sequence can hold.
  virtual int n_ctx() const = 0;
  // Makes positions [0, n_pos) of seq writable; throws spool::Error if it cannot.
  virtual void reserve(int seq, int n_pos) = 0;
  // Block table of seq for one layer (valid until the next reserve/clear).
  virtual KvSeqView view(int layer, int seq) = 0;
  // Forgets everything stored for seq.
  virtual void clear(int seq) = 0;
  virtual uint64_t bytes_allocated() const = 0;
  // The recurrent state of hybrid models (nullptr when the shape has none).
  // reserve() allocates a sequence's state, clear() frees it.
  RecurrentState* recurrent() { return recurrent_.get(); }
  const RecurrentState* recurrent() const { return recurrent_.get(); }

 protected:
  void init_recurrent(const KvShape& shape, int max_seqs) {
    if (!shape.recurrent.empty()) recurrent_ = std::make_unique<RecurrentState>(shape.recurrent, max_seqs);
  }
  std::unique_ptr<RecurrentState> recurrent_;
};

// One contiguous n_ctx buffer per sequence, allocated on first use.
std::unique_ptr<KvCache> make_simple_kv_cache(const KvShape& shape, int n_ctx, int max_seqs);

}  // namespace spool
