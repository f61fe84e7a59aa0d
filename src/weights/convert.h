// --convert TYPE: matmul weights converted at load into another type, held in
// memory (for speed over exactness: e.g. FP8 or BF16 checkpoints as Q8_0).
// Every 2-D weight whose rows fit the type's blocks is converted from what the
// file stores (F32, F16, BF16, block-scaled F8_E4M3, Q4_0 repacked int4, or
// any GGUF type) through float rows; routers (ffn_gate_inp) and scale grids
// stay as they are.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "format/manifest.h"

namespace spool {

class ThreadPool;

struct ConvertStats {
  int n_converted = 0, n_kept = 0;  // 2-D weights converted / left (rows do not fit the blocks)
  uint64_t bytes_before = 0, bytes_after = 0;  // of the converted tensors
};

// Throws spool::Error if `to` cannot be a matmul weight type (no quantize or
// dot kernel, or a block-scaled type).
void check_convert_target(DType to);
ConvertStats convert_matmul_weights(Manifest& m, DType to, ThreadPool* pool);

}  // namespace spool
