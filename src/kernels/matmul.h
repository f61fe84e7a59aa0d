// Matrix multiplication of a weight matrix (any DType, rows contiguous) with a
// batch of float activations: y[t, o] = sum_i W[o, i] * x[t, i]. The activation
// rows are converted once to the weight type's vec_dot_type, then the output
// is computed in tiles across the thread pool, so each weight row is read once
// per call whatever the batch size.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace spool {

class ThreadPool;

struct MatView {      // a 2-D weight: n_rows rows of n_cols elements
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t n_cols = 0;  // inner dimension (GGUF ne[0])
  int64_t n_rows = 0;  // output dimension (GGUF ne[1])
  // Optional copy in kernels()'s packed layout for this type (see
  // PackedKernels), made by pack_matrix(); matmul prefers it when set.
  const void* packed = nullptr;
  // Block-scaled types (F8_E4M3) only: element (r, c) is scaled by
  // block_scale[((scale_row0 + r) / block_rows) * scale_cols + c / block_cols].
  const float* block_scale = nullptr;
  int64_t block_rows = 0, block_cols = 0;
  int64_t scale_cols = 0;  // scales per block row: ceil(n_cols / block_cols)
  int64_t scale_row0 = 0;  // this view's first row within the matrix the scales cover
  size_t row_stride() const { return row_bytes(type, n_cols); }
  // The scales of row r's column blocks (block-scaled views only).
  const float* row_scales(int64_t r) const { return block_scale + ((scale_row0 + r) / block_rows) * scale_cols; }
};

// Rows [row0, row0 + n_rows) of w as a view of their own (keeps a block
// scale; drops a packed copy).
MatView row_slice(const MatView& w, int64_t row0, int64_t n_rows);

// Bytes of w's packed copy; 0 when kernels() has no packed path for w.type.
size_t packed_matrix_bytes(const MatView& w);
// Writes w's packed copy into out (packed_matrix_bytes(w) bytes, 64-byte
// aligned), splitting the work over pool when given.
void pack_matrix(const MatView& w, void* out, ThreadPool* pool);

// x: [n_tokens, W.n_cols] floats, y: [n_tokens, W.n_rows] floats.
// scratch is reused between calls to hold converted activations.
void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t n_tokens, float* y,
            std::vector<uint8_t>& scratch);

// Several matrices applied to the same input x (Q/K/V, gate/up): y[i] =
// x W[i]^T. Matrices with a packed copy share one activation conversion per
// format and one pool job; the others go through matmul() one by one. Each
// result equals matmul()'s for that matrix alone. At most 8 matrices.
void matmul_many(ThreadPool& pool, const MatView* const* w, float* const* y, int n_mats, const float* x,
                 int64_t n_tokens, std::vector<uint8_t>& scratch);
// The common pair (a feed-forward's gate and up): ya = x a^T, yb = x b^T.
void matmul_pair(ThreadPool& pool, const MatView& a, const MatView& b, const float* x, int64_t n_tokens, float* ya,
                 float* yb, std::vector<uint8_t>& scratch);

// Batch-invariant mode, per calling thread (the serving engine turns it on):
// a single activation row goes through the same tile kernels as a row inside
// a batch (it is run as a batch of two copies), instead of the per-row decode
// kernels whose summation order differs. Packed weights need no detour: their
// tiles compute every row the same way whatever the tile's width. Every row's result then depends only
// on that row, never on what was batched with it.
void set_matmul_batch_invariant(bool on);
bool matmul_batch_invariant();

// Reads row r of w as floats (embedding lookup of any type).
void get_row(const MatView& w, int64_t r, float* out);

}  // namespace spool
