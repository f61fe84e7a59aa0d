// KV cache interface. Attention reads a sequence's keys and values through a
// block table (KvSeqView): the simple cache here gives each sequence one block
// of n_ctx positions; the paged cache (serving) gives many fixed-size blocks
// shared between sequences. K/V rows are [n_head_kv * head_dim] floats. MLA
// models store one row [kv_lora_rank + rope dims] per token (n_head_kv 1, the
// compressed latent then the rope key) and no V row (head_dim_v 0).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace spool {

struct KvShape {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  int k_row() const { return n_head_kv * head_dim_k; }
  int v_row() const { return n_head_kv * head_dim_v; }
};

struct KvSeqView {
  int block_size = 0;
  int k_row = 0, v_row = 0;
  std::vector<float*> k_blocks, v_blocks;
  float* k(int pos) const { return k_blocks[pos / block_size] + (size_t)(pos % block_size) * k_row; }
  float* v(int pos) const { return v_blocks[pos / block_size] + (size_t)(pos % block_size) * v_row; }
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
};

// One contiguous n_ctx buffer per sequence, allocated on first use.
std::unique_ptr<KvCache> make_simple_kv_cache(const KvShape& shape, int n_ctx, int max_seqs);

}  // namespace spool
