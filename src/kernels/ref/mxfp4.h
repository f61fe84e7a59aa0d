// What the MXFP4 kernels of every instruction set share with the reference
// (ref/mxfp4.cpp): the value table and the block scale. Part of the format:
// a SIMD kernel looks its nibbles up in this table and must scale as this does.
#pragma once

#include <cstdint>

namespace spool::detail {

// The e2m1 values doubled (0, .5, 1, 1.5, 2, 3, 4, 6 -> integers, then the
// negatives), indexed by a nibble, so a dot with Q8_0 stays in integers.
extern const int8_t kMxfp4Values[16];

// 2^(e - 128): the e8m0 scale 2^(e - 127), halved to undo the doubling.
float mxfp4_half_scale(uint8_t e);

}  // namespace spool::detail
