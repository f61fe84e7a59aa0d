// NEON kernels of the low-bit types that dot with Q8_K (IQ1_S, IQ1_M,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS, TQ1_0, TQ2_0).
//
// These formats cost most in decoding a block (grid lookups, sign patterns),
// little in the dot itself. Each format's unpack() decodes a block of 256
// weights into registers (Unpacked: sixteen int8x16 of signed levels, the
// integer scale of each group of 16 or 32 weights, and one float factor per
// block), as the x86 kernels do (x86/iq_impl.h). Tiles of 1-4 activation rows
// (decode) dot each block straight from registers; larger tiles (prefill)
// decode 4 weight rows once into a per-thread scratch that stays in L1 or L2
// and dot them with every activation row. Both paths end in block_isum() and
// the same float step, so a token's result does not depend on its batch.
//
// The integer scales are exact: every format's group scale is the block's
// float factor times a small integer (IQ2: d / 8 * (2l + 1), IQ1: levels
// 8 * point +- 1 under d / 8 * (2l + 1), ...), and a block's sum of
// scale * (sum of 16 or 32 products) stays far inside int32.
//
// Grid points are loaded one by one (8 bytes, or 4 for IQ3), indices read from
// the block; signs become +-1 multipliers, from a table of the 128 even-parity
// patterns (7-bit sign indices) or from the sign bytes by a byte shuffle and a
// bit test (explicit signs).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/quant_blocks.h"
#include "kernels/iq_codebooks.h"
#include "kernels/neon/common.h"

// The unpacks return their block through registers only when inlined.
#define SPOOL_IQ_INLINE __attribute__((always_inline)) inline

namespace spool::detail {
namespace {

// ---- tables -------------------------------------------------------------------

struct Books {
  const IqCodebooks* cb;
  // The even-parity sign pattern of each 7-bit index as 8 bytes of +1 / -1.
  uint64_t pm7[128];
};

inline uint64_t pm_of_byte(uint8_t s) {
  uint64_t v = 0;
  for (int j = 0; j < 8; ++j) v |= (uint64_t)((s >> j) & 1 ? 0xff : 0x01) << (8 * j);
  return v;
}

const Books& books() {
  static const Books* b = [] {
    auto* x = new Books{};
    x->cb = &iq_codebooks();
    for (int i = 0; i < 128; ++i) x->pm7[i] = pm_of_byte(x->cb->signs[i]);
    return x;
  }();
  return *b;
}

// ---- decoding helpers -----------------------------------------------------------

inline uint32_t load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Two 8-byte table entries (grid points or sign multipliers) as one register.
inline int8x16_t pair64(const uint64_t* t, unsigned i0, unsigned i1) {
  return vreinterpretq_s8_u64(vcombine_u64(vld1_u64(t + i0), vld1_u64(t + i1)));
}

// Four 4-byte grid points as one register.
inline int8x16_t quad32(const uint32_t* t, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
  uint32x4_t v = vld1q_dup_u32(t + i0);
  v = vld1q_lane_u32(t + i1, v, 1);
  v = vld1q_lane_u32(t + i2, v, 2);
  v = vld1q_lane_u32(t + i3, v, 3);
  return vreinterpretq_s8_u32(v);
}

// +1 / -1 for weights 16k .. 16k + 15 of 32 weights whose sign bits (bit j of
// byte i: weight 8i + j negative) are the 4 bytes at s; k is 0 or 1.
// Weights 16k' .. of the 128 whose sign bytes are s16 (k' = 0 .. 7).
inline int8x16_t pm16(uint8x16_t s16, int k) {
  const uint8x16_t idx = vcombine_u8(vdup_n_u8((uint8_t)(2 * k)), vdup_n_u8((uint8_t)(2 * k + 1)));
  const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  const uint8x16_t neg = vtstq_u8(vqtbl1q_u8(s16, idx), bit);
  return vreinterpretq_s8_u8(vorrq_u8(neg, vdupq_n_u8(1)));
}

// The sign bytes of 7-bit sign indices: each completed by its parity bit
// (the sign patterns of 8 weights have an even number of minus signs).
inline uint8x16_t even_parity(uint8x16_t i7) { return vsliq_n_u8(i7, vcntq_u8(i7), 7); }

// 16-bit grid indices from 16 low bytes and 16 high bytes, stored at out.
inline void store_indices(uint8x16_t lo, uint8x16_t hi, uint16_t* out) {
  vst1q_u16(out, vreinterpretq_u16_u8(vzip1q_u8(lo, hi)));
  vst1q_u16(out + 8, vreinterpretq_u16_u8(vzip2q_u8(lo, hi)));
}

// The four fields of w at bits shift[l] (masked by m), as int32.
inline int32x4_t fields(uint32_t w, int32x4_t neg_shift, uint32_t m) {
  return vreinterpretq_s32_u32(vandq_u32(vshlq_u32(vdupq_n_u32(w), neg_shift), vdupq_n_u32(m)));
}
inline int32x4_t odd(int32x4_t l) { return vaddq_s32(vaddq_s32(l, l), vdupq_n_s32(1)); }  // 2 l + 1
inline int32x4_t shifts(int a, int b, int c, int d) {
  const int32_t s[4] = {-a, -b, -c, -d};
  return vld1q_s32(s);
}

// ---- a decoded block ----------------------------------------------------------

// One block: levels of weights 16k .. 16k + 15 in q[k]; the integer scale of
// group g in lane g % 4 of sc[g / 4] (kGroup 32: groups of 32, sc[0..1];
// kGroup 16: sc[0..3]; kGroup 256: none); weight i = d * scale * q[i].
struct Unpacked {
  int8x16_t q[16];
  int32x4_t sc[4];
  float d;
};

// Formats with one scale may store levels as q + 1 (kOffset): the block's
// sum then takes off the activations' sum once (from Q8_K's bsums).
template <class U, class = void>
struct Offset : std::false_type {};
template <class U>
struct Offset<U, std::void_t<decltype(U::kOffset)>> : std::bool_constant<U::kOffset> {};

// The block's integer sum: sum over groups of scale * (sum of products with
// the activations). Exact, so its evaluation order does not matter.
template <class U>
SPOOL_IQ_INLINE int32_t block_isum(const Unpacked& u, const BlockQ8_K& y) {
  const int8_t* x = y.qs;
  const int32x4_t z = vdupq_n_s32(0);
  if constexpr (U::kGroup == 16) {
    int32x4_t acc[2] = {z, z};
    SPOOL_UNROLL for (int k = 0; k < 16; ++k) {
      const int32x4_t p = vdotq_s32(z, u.q[k], vld1q_s8(x + 16 * k));
      switch (k % 4) {
        case 0: acc[k % 2] = vmlaq_laneq_s32(acc[k % 2], p, u.sc[k / 4], 0); break;
        case 1: acc[k % 2] = vmlaq_laneq_s32(acc[k % 2], p, u.sc[k / 4], 1); break;
        case 2: acc[k % 2] = vmlaq_laneq_s32(acc[k % 2], p, u.sc[k / 4], 2); break;
        default: acc[k % 2] = vmlaq_laneq_s32(acc[k % 2], p, u.sc[k / 4], 3); break;
      }
    }
    return vaddvq_s32(vaddq_s32(acc[0], acc[1]));
  } else if constexpr (U::kGroup == 32) {
    int32x4_t acc[2] = {z, z};
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const int32x4_t p = vdotq_s32(vdotq_s32(z, u.q[2 * g], vld1q_s8(x + 32 * g)), u.q[2 * g + 1], vld1q_s8(x + 32 * g + 16));
      switch (g % 4) {
        case 0: acc[g % 2] = vmlaq_laneq_s32(acc[g % 2], p, u.sc[g / 4], 0); break;
        case 1: acc[g % 2] = vmlaq_laneq_s32(acc[g % 2], p, u.sc[g / 4], 1); break;
        case 2: acc[g % 2] = vmlaq_laneq_s32(acc[g % 2], p, u.sc[g / 4], 2); break;
        default: acc[g % 2] = vmlaq_laneq_s32(acc[g % 2], p, u.sc[g / 4], 3); break;
      }
    }
    return vaddvq_s32(vaddq_s32(acc[0], acc[1]));
  } else {
    static_assert(U::kGroup == kQKK);
    int32x4_t acc[4] = {z, z, z, z};
    SPOOL_UNROLL for (int k = 0; k < 16; ++k) acc[k % 4] = vdotq_s32(acc[k % 4], u.q[k], vld1q_s8(x + 16 * k));
    int32x4_t sum = vaddq_s32(vaddq_s32(acc[0], acc[1]), vaddq_s32(acc[2], acc[3]));
    if constexpr (Offset<U>::value) {
      // two sums of 16 activations fit int16 (|.| <= 2 * 16 * 128)
      const int16x8_t bs = vaddq_s16(vld1q_s16(y.bsums), vld1q_s16(y.bsums + 8));
      sum = vsubq_s32(sum, vpaddlq_s16(bs));
    }
    return vaddvq_s32(sum);
  }
}

// The one float step per (block, token), shared by every path.
SPOOL_IQ_INLINE float block_term(int32_t isum, float dw, float da) { return (float)isum * (dw * da); }

// ---- the formats ----------------------------------------------------------------
// Each has Block, kGroup (16, 32 or 256 weights per integer scale) and
// unpack(books, block, u).

// IQ2_XXS: per 32 weights four 8-bit grid indices, then a word of four 7-bit
// sign indices and a 4-bit scale l: d * (l + 1/2) / 4 = d / 8 * (2 l + 1).
struct NeonIQ2_XXS {
  using Block = BlockIQ2_XXS;
  static constexpr int kGroup = 32;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const auto* raw = reinterpret_cast<const uint8_t*>(b.qs);
    const auto* grid = reinterpret_cast<const uint64_t*>(bk.cb->iq2xxs);
    u.d = neon_h2f(b.d) * 0.125f;
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const uint32x4x2_t w = vld2q_u32(reinterpret_cast<const uint32_t*>(raw + 32 * h));  // index words, meta words
      u.sc[h] = odd(vreinterpretq_s32_u32(vshrq_n_u32(w.val[1], 28)));
    }
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const uint32_t idx = load32(raw + 8 * g), meta = load32(raw + 8 * g + 4);
      SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
        const int8x16_t p = pair64(grid, (idx >> (16 * j)) & 0xff, (idx >> (16 * j + 8)) & 0xff);
        const int8x16_t s = pair64(bk.pm7, (meta >> (14 * j)) & 127, (meta >> (14 * j + 7)) & 127);
        u.q[2 * g + j] = vmulq_s8(p, s);
      }
    }
  }
};

// The 4-bit scales per 16 of IQ2_XS / IQ2_S (low nibble first), as 2 l + 1.
SPOOL_IQ_INLINE void iq2_scales16(const uint8_t* scales, Unpacked& u) {
  const uint8x8_t v = vld1_u8(scales);
  const uint8x8x2_t z = vzip_u8(vand_u8(v, vdup_n_u8(0xf)), vshr_n_u8(v, 4));
  const uint8x16_t l = vcombine_u8(z.val[0], z.val[1]);
  const uint8x16_t s = vorrq_u8(vshlq_n_u8(l, 1), vdupq_n_u8(1));
  const uint16x8_t lo = vmovl_u8(vget_low_u8(s)), hi = vmovl_high_u8(s);
  u.sc[0] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo)));
  u.sc[1] = vreinterpretq_s32_u32(vmovl_high_u16(lo));
  u.sc[2] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi)));
  u.sc[3] = vreinterpretq_s32_u32(vmovl_high_u16(hi));
}

// IQ2_XS: per 8 weights a 9-bit grid index and a 7-bit sign index.
struct NeonIQ2_XS {
  using Block = BlockIQ2_XS;
  static constexpr int kGroup = 16;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const auto* grid = reinterpret_cast<const uint64_t*>(bk.cb->iq2xs);
    u.d = neon_h2f(b.d) * 0.125f;
    iq2_scales16(b.scales, u);
    // Grid indices (low 9 bits) to memory, where each is one load away;
    // sign indices (top 7 bits) to sign bytes in registers.
    alignas(16) uint16_t idx[32];
    uint8x16_t sg[2];
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const uint16x8_t v0 = vld1q_u16(b.qs + 16 * h), v1 = vld1q_u16(b.qs + 16 * h + 8);
      vst1q_u16(idx + 16 * h, vandq_u16(v0, vdupq_n_u16(511)));
      vst1q_u16(idx + 16 * h + 8, vandq_u16(v1, vdupq_n_u16(511)));
      const uint8x16_t top = vuzp2q_u8(vreinterpretq_u8_u16(v0), vreinterpretq_u8_u16(v1));  // high bytes
      sg[h] = even_parity(vshrq_n_u8(top, 1));
    }
    SPOOL_UNROLL for (int k = 0; k < 16; ++k)
      u.q[k] = vmulq_s8(pair64(grid, idx[2 * k], idx[2 * k + 1]), pm16(sg[k / 8], k % 8));
  }
};

// IQ2_S: per 8 weights a 10-bit grid index (8 bits in qs, 2 in qh) and an
// explicit sign byte (after the indices).
struct NeonIQ2_S {
  using Block = BlockIQ2_S;
  static constexpr int kGroup = 16;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const auto* grid = reinterpret_cast<const uint64_t*>(bk.cb->iq2s);
    u.d = neon_h2f(b.d) * 0.125f;
    iq2_scales16(b.scales, u);
    // index p: qs[p] | bits 2 (p % 4) .. of qh[p / 4] as bits 8-9
    alignas(16) uint16_t idx[32];
    static const uint8_t kRep[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    static const int8_t kShift[16] = {0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6};
    const uint8x8_t qh = vld1_u8(b.qh);
    const uint8x16_t qh2 = vcombine_u8(qh, qh), rep = vld1q_u8(kRep);
    const int8x16_t sh = vld1q_s8(kShift);
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const uint8x16_t hb = vqtbl1q_u8(qh2, vaddq_u8(rep, vdupq_n_u8((uint8_t)(4 * h))));
      const uint8x16_t hi = vandq_u8(vshlq_u8(hb, sh), vdupq_n_u8(3));
      store_indices(vld1q_u8(b.qs + 16 * h), hi, idx + 16 * h);
    }
    const uint8_t* signs = b.qs + kQKK / 8;
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const uint8x16_t s16 = vld1q_u8(signs + 16 * h);
      SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
        const int m = 8 * h + k;
        u.q[m] = vmulq_s8(pair64(grid, idx[2 * m], idx[2 * m + 1]), pm16(s16, k));
      }
    }
  }
};

// IQ3_XXS: 64 8-bit indices into a grid of 4-byte points, then per 32 weights
// a word of four 7-bit sign indices and a 4-bit scale l: d * (l + 1/2) / 2.
struct NeonIQ3_XXS {
  using Block = BlockIQ3_XXS;
  static constexpr int kGroup = 32;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const auto* grid = reinterpret_cast<const uint32_t*>(bk.cb->iq3xxs);
    const uint8_t* meta = b.qs + kQKK / 4;
    u.d = neon_h2f(b.d) * 0.25f;
    SPOOL_UNROLL for (int h = 0; h < 2; ++h)
      u.sc[h] = odd(vreinterpretq_s32_u32(vshrq_n_u32(vld1q_u32(reinterpret_cast<const uint32_t*>(meta + 16 * h)), 28)));
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const uint32_t m = load32(meta + 4 * g);
      const uint8_t* q = b.qs + 8 * g;
      SPOOL_UNROLL for (int j = 0; j < 2; ++j) {
        const int8x16_t p = quad32(grid, q[4 * j], q[4 * j + 1], q[4 * j + 2], q[4 * j + 3]);
        const int8x16_t s = pair64(bk.pm7, (m >> (14 * j)) & 127, (m >> (14 * j + 7)) & 127);
        u.q[2 * g + j] = vmulq_s8(p, s);
      }
    }
  }
};

// IQ3_S: 9-bit indices (the top bits in qh) into a grid of 4-byte points,
// explicit signs, 4-bit scales per 32: d * (1 + 2 l).
struct NeonIQ3_S {
  using Block = BlockIQ3_S;
  static constexpr int kGroup = 32;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const auto* grid = reinterpret_cast<const uint32_t*>(bk.cb->iq3s);
    u.d = neon_h2f(b.d);
    const uint32_t sw = load32(b.scales);
    u.sc[0] = odd(fields(sw, shifts(0, 4, 8, 12), 0xf));
    u.sc[1] = odd(fields(sw, shifts(16, 20, 24, 28), 0xf));
    // index p: qs[p] | bit p % 8 of qh[p / 8] as bit 8
    alignas(16) uint16_t idx[64];
    const uint8x8_t qh = vld1_u8(b.qh);
    const uint8x16_t qh2 = vcombine_u8(qh, qh);
    const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
    SPOOL_UNROLL for (int m = 0; m < 4; ++m) {
      const uint8x16_t rep = vcombine_u8(vdup_n_u8((uint8_t)(2 * m)), vdup_n_u8((uint8_t)(2 * m + 1)));
      const uint8x16_t hi = vandq_u8(vtstq_u8(vqtbl1q_u8(qh2, rep), bit), vdupq_n_u8(1));
      store_indices(vld1q_u8(b.qs + 16 * m), hi, idx + 16 * m);
    }
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const uint8x16_t s16 = vld1q_u8(b.signs + 16 * h);
      SPOOL_UNROLL for (int k = 0; k < 8; ++k) {
        const uint16_t* i = idx + 4 * (8 * h + k);
        u.q[8 * h + k] = vmulq_s8(quad32(grid, i[0], i[1], i[2], i[3]), pm16(s16, k));
      }
    }
  }
};

// IQ1_S: per 8 weights an 11-bit index into a grid of -1 / 0 / 1; per 32
// weights a 3-bit scale l and the sign of the +-1/8 shift: levels
// 8 * point +- 1 under d / 8 * (2 l + 1).
struct NeonIQ1_S {
  using Block = BlockIQ1_S;
  static constexpr int kGroup = 32;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const auto* grid = reinterpret_cast<const uint64_t*>(bk.cb->iq1s);
    u.d = neon_h2f(b.d) * 0.125f;
    const uint16x8_t l = vandq_u16(vshrq_n_u16(vld1q_u16(b.qh), 12), vdupq_n_u16(7));
    u.sc[0] = odd(vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(l))));
    u.sc[1] = odd(vreinterpretq_s32_u32(vmovl_high_u16(l)));
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const unsigned h = b.qh[g];
      const uint8_t* q = b.qs + 4 * g;
      const int8x16_t delta = vdupq_n_s8(h & 0x8000 ? -1 : 1);
      const int8x16_t p0 = pair64(grid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8);
      const int8x16_t p1 = pair64(grid, q[2] | ((h >> 6) & 7) << 8, q[3] | ((h >> 9) & 7) << 8);
      u.q[2 * g] = vaddq_s8(vshlq_n_s8(p0, 3), delta);
      u.q[2 * g + 1] = vaddq_s8(vshlq_n_s8(p1, 3), delta);
    }
  }
};

// IQ1_M: as IQ1_S with the shift's sign per 8 weights (bit 3 of each index's
// nibble in qh) and 3-bit scales per 16; the fp16 scale is spread over the
// top nibbles of the four scale words.
struct NeonIQ1_M {
  using Block = BlockIQ1_M;
  static constexpr int kGroup = 16;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    const auto* grid = reinterpret_cast<const uint64_t*>(bk.cb->iq1s);
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof sc);
    const uint16_t d16 = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    u.d = neon_h2f(d16) * 0.125f;
    const int32x4_t sh = shifts(0, 3, 6, 9);
    SPOOL_UNROLL for (int j = 0; j < 4; ++j) u.sc[j] = odd(fields(sc[j], sh, 7));
    const uint8x16_t bit = vcombine_u8(vdup_n_u8(0x08), vdup_n_u8(0x80));
    SPOOL_UNROLL for (int k = 0; k < 16; ++k) {
      // weights 16k ..: indices qs[2k], qs[2k + 1]; their nibbles in qh[k]
      const unsigned h = b.qh[k];
      const int8x16_t p = pair64(grid, b.qs[2 * k] | (h & 7) << 8, b.qs[2 * k + 1] | ((h >> 4) & 7) << 8);
      const int8x16_t delta = vreinterpretq_s8_u8(vorrq_u8(vtstq_u8(vdupq_n_u8((uint8_t)h), bit), vdupq_n_u8(1)));
      u.q[k] = vaddq_s8(vshlq_n_s8(p, 3), delta);
    }
  }
};

// IQ4_XS: 4-bit indices into 16 non-linear levels, 6-bit scales per 32 (minus 32).
struct NeonIQ4_XS {
  using Block = BlockIQ4_XS;
  static constexpr int kGroup = 32;
  static SPOOL_IQ_INLINE void unpack(const Books& bk, const Block& b, Unpacked& u) {
    u.d = neon_h2f(b.d);
    const uint32_t lw = load32(b.scales_l);
    SPOOL_UNROLL for (int h = 0; h < 2; ++h) {
      const int32x4_t lo = fields(lw, shifts(16 * h, 16 * h + 4, 16 * h + 8, 16 * h + 12), 0xf);
      const int32x4_t hi = fields(b.scales_h, shifts(8 * h, 8 * h + 2, 8 * h + 4, 8 * h + 6), 3);
      u.sc[h] = vsubq_s32(vorrq_s32(lo, vshlq_n_s32(hi, 4)), vdupq_n_s32(32));
    }
    const int8x16_t t = vld1q_s8(bk.cb->iq4nl);
    SPOOL_UNROLL for (int g = 0; g < 8; ++g) {
      const uint8x16_t x = vld1q_u8(b.qs + 16 * g);
      u.q[2 * g] = vqtbl1q_s8(t, vandq_u8(x, vdupq_n_u8(0xf)));
      u.q[2 * g + 1] = vqtbl1q_s8(t, vshrq_n_u8(x, 4));
    }
  }
};

// TQ1_0: ternary digits, five per byte of qs and four per byte of qh; digit n
// of x is the top base-3 digit of x * 3^n (mod 256): (v * 3) >> 8, taken as
// ((v + (v >> 1)) / 2) >> 6 in 8 bits. Levels stored as the digit (q + 1).
struct NeonTQ1_0 {
  using Block = BlockTQ1_0;
  static constexpr int kGroup = kQKK;
  static constexpr bool kOffset = true;
  static int8x16_t digit(uint8x16_t v) { return vreinterpretq_s8_u8(vshrq_n_u8(vhaddq_u8(v, vshrq_n_u8(v, 1)), 6)); }
  static SPOOL_IQ_INLINE void unpack(const Books&, const Block& b, Unpacked& u) {
    u.d = neon_h2f(b.d);
    // Weights 0-159: the five digits of qs[0..31]; 160-239: those of
    // qs[32..47]; 240-255: the four digits of qh[0..3].
    const uint8x16_t x0 = vld1q_u8(b.qs), x1 = vld1q_u8(b.qs + 16), y = vld1q_u8(b.qs + 32);
    static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    SPOOL_UNROLL for (int n = 0; n < 5; ++n) {
      uint8x16_t p = vdupq_n_u8(kPow3[n]);
      __asm__("" : "+w"(p));  // one multiply, not the shift and add GCC makes of * 3 and * 9
      u.q[2 * n] = digit(n ? vmulq_u8(x0, p) : x0);
      u.q[2 * n + 1] = digit(n ? vmulq_u8(x1, p) : x1);
      u.q[10 + n] = digit(n ? vmulq_u8(y, p) : y);
    }
    static const uint8_t kPow[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    u.q[15] = digit(vmulq_u8(vreinterpretq_u8_u32(vdupq_n_u32(load32(b.qh))), vld1q_u8(kPow)));
  }
};

// TQ2_0: 2-bit fields q + 1, four per byte, stored as they are; weights
// 128 j + 32 l + m are field l of byte 32 j + m.
struct NeonTQ2_0 {
  using Block = BlockTQ2_0;
  static constexpr int kGroup = kQKK;
  static constexpr bool kOffset = true;
  static SPOOL_IQ_INLINE void unpack(const Books&, const Block& b, Unpacked& u) {
    u.d = neon_h2f(b.d);
    const uint8x16_t three = vdupq_n_u8(3);
    SPOOL_UNROLL for (int j = 0; j < 4; ++j) {
      const uint8x16_t x = vld1q_u8(b.qs + 16 * j);  // bytes 32 (j / 2) + 16 (j % 2) ..
      const int base = 8 * (j / 2) + (j % 2);
      u.q[base] = vreinterpretq_s8_u8(vandq_u8(x, three));
      u.q[base + 2] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(x, 2), three));
      u.q[base + 4] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(x, 4), three));
      u.q[base + 6] = vreinterpretq_s8_u8(vshrq_n_u8(x, 6));
    }
  }
};

// ---- the drivers ------------------------------------------------------------------

// Few activation rows (decode): each block is decoded into registers and
// dotted with the C rows at once.
template <class U, int C>
void gemm_direct(int64_t nb, const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, float* c, size_t ldc) {
  const Books& bk = books();
  const BlockQ8_K* at[C];
  SPOOL_UNROLL for (int t = 0; t < C; ++t) at[t] = reinterpret_cast<const BlockQ8_K*>(a + t * as);
  for (int r = 0; r < nr; ++r) {
    const auto* b = reinterpret_cast<const typename U::Block*>(w + r * ws);
    float acc[C] = {};
    for (int64_t i = 0; i < nb; ++i) {
      Unpacked u;
      U::unpack(bk, b[i], u);
      SPOOL_UNROLL for (int t = 0; t < C; ++t)
        acc[t] += block_term(block_isum<U>(u, at[t][i]), u.d, at[t][i].d);
    }
    SPOOL_UNROLL for (int t = 0; t < C; ++t) c[t * ldc + r] = acc[t];
  }
}

// Many activation rows (prefill): kScratchRows weight rows at a time are
// decoded once into a per-thread scratch, then dotted with the activation
// rows two at a time (kScratchTokens), the rows side by side, so that each
// register of levels serves several tokens and each register of activations
// four rows.
constexpr int kScratchRows = 4;

// Scale vectors a format stores per block.
template <class U>
constexpr int kScaleVecs = U::kGroup == 16 ? 4 : U::kGroup == 32 ? 2 : 0;

struct RowScratch {
  std::vector<int8_t> lv;   // levels, row r at r * n
  std::vector<int32_t> sc;  // 16 per block
  std::vector<float> d;     // one per block
};

template <class U>
SPOOL_IQ_INLINE void store(const Unpacked& u, int8_t* lv, int32_t* sc, float* d) {
  SPOOL_UNROLL for (int k = 0; k < 16; ++k) vst1q_s8(lv + 16 * k, u.q[k]);
  SPOOL_UNROLL for (int j = 0; j < kScaleVecs<U>; ++j) vst1q_s32(sc + 4 * j, u.sc[j]);
  *d = u.d;
}
template <class U>
SPOOL_IQ_INLINE void load(Unpacked& u, const int8_t* lv, const int32_t* sc, const float* d) {
  SPOOL_UNROLL for (int k = 0; k < 16; ++k) u.q[k] = vld1q_s8(lv + 16 * k);
  SPOOL_UNROLL for (int j = 0; j < kScaleVecs<U>; ++j) u.sc[j] = vld1q_s32(sc + 4 * j);
  u.d = *d;
}

// The integer sums of one block of R scratch rows (levels lv[r], scales
// sc[r]) with T activation blocks y[t]: block_isum's sums, group by group,
// each weight register loaded once for the T tokens and each activation
// register once for the R rows.
template <class U, int R, int T>
SPOOL_IQ_INLINE void block_isums(const int8_t* const (&lv)[R], const int32_t* const (&sc)[R],
                                 const BlockQ8_K* const (&y)[T], int32_t (&out)[R][T]) {
  const int32x4_t z = vdupq_n_s32(0);
  int32x4_t acc[R][T];
  SPOOL_UNROLL for (int r = 0; r < R; ++r)
    SPOOL_UNROLL for (int t = 0; t < T; ++t) acc[r][t] = z;
  if constexpr (U::kGroup == 16 || U::kGroup == 32) {
    constexpr int kRegs = U::kGroup / 16, kGroups = 16 / kRegs;  // registers per group, groups per block
    SPOOL_UNROLL for (int q = 0; q < kGroups / 4; ++q) {  // groups 4q .. 4q + 3: lanes of scale vector q
      int32x4_t scv[R];
      SPOOL_UNROLL for (int r = 0; r < R; ++r) scv[r] = vld1q_s32(sc[r] + 4 * q);
      SPOOL_UNROLL for (int l = 0; l < 4; ++l) {
        const int g = 4 * q + l;
        int8x16_t w[R][kRegs], x[T][kRegs];
        SPOOL_UNROLL for (int r = 0; r < R; ++r)
          SPOOL_UNROLL for (int k = 0; k < kRegs; ++k) w[r][k] = vld1q_s8(lv[r] + 16 * (kRegs * g + k));
        SPOOL_UNROLL for (int t = 0; t < T; ++t)
          SPOOL_UNROLL for (int k = 0; k < kRegs; ++k) x[t][k] = vld1q_s8(y[t]->qs + 16 * (kRegs * g + k));
        SPOOL_UNROLL for (int r = 0; r < R; ++r) {
          SPOOL_UNROLL for (int t = 0; t < T; ++t) {
            int32x4_t p = vdotq_s32(z, w[r][0], x[t][0]);
            if constexpr (kRegs == 2) p = vdotq_s32(p, w[r][1], x[t][1]);
            switch (l) {
              case 0: acc[r][t] = vmlaq_laneq_s32(acc[r][t], p, scv[r], 0); break;
              case 1: acc[r][t] = vmlaq_laneq_s32(acc[r][t], p, scv[r], 1); break;
              case 2: acc[r][t] = vmlaq_laneq_s32(acc[r][t], p, scv[r], 2); break;
              default: acc[r][t] = vmlaq_laneq_s32(acc[r][t], p, scv[r], 3); break;
            }
          }
        }
      }
    }
  } else {
    static_assert(U::kGroup == kQKK);
    SPOOL_UNROLL for (int k = 0; k < 16; ++k) {
      int8x16_t w[R], x[T];
      SPOOL_UNROLL for (int r = 0; r < R; ++r) w[r] = vld1q_s8(lv[r] + 16 * k);
      SPOOL_UNROLL for (int t = 0; t < T; ++t) x[t] = vld1q_s8(y[t]->qs + 16 * k);
      SPOOL_UNROLL for (int r = 0; r < R; ++r)
        SPOOL_UNROLL for (int t = 0; t < T; ++t) acc[r][t] = vdotq_s32(acc[r][t], w[r], x[t]);
    }
    if constexpr (Offset<U>::value) {
      SPOOL_UNROLL for (int t = 0; t < T; ++t) {
        const int32x4_t bs = vpaddlq_s16(vaddq_s16(vld1q_s16(y[t]->bsums), vld1q_s16(y[t]->bsums + 8)));
        SPOOL_UNROLL for (int r = 0; r < R; ++r) acc[r][t] = vsubq_s32(acc[r][t], bs);
      }
    }
  }
  SPOOL_UNROLL for (int r = 0; r < R; ++r)
    SPOOL_UNROLL for (int t = 0; t < T; ++t) out[r][t] = vaddvq_s32(acc[r][t]);
}

// R scratch rows against T activation rows (at[t], outputs c[t]).
template <class U, int R, int T>
void dot_rows(int64_t nb, const RowScratch& s, int64_t n, const BlockQ8_K* const (&at)[T], float* const (&c)[T]) {
  float acc[R][T] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const int8_t* lv[R];
    const int32_t* sc[R];
    SPOOL_UNROLL for (int r = 0; r < R; ++r) {
      lv[r] = s.lv.data() + r * n + kQKK * i;
      sc[r] = s.sc.data() + (r * nb + i) * 16;
    }
    const BlockQ8_K* y[T];
    SPOOL_UNROLL for (int t = 0; t < T; ++t) y[t] = at[t] + i;
    int32_t isum[R][T];
    block_isums<U, R, T>(lv, sc, y, isum);
    SPOOL_UNROLL for (int r = 0; r < R; ++r)
      SPOOL_UNROLL for (int t = 0; t < T; ++t) acc[r][t] += block_term(isum[r][t], s.d[r * nb + i], y[t]->d);
  }
  SPOOL_UNROLL for (int r = 0; r < R; ++r)
    SPOOL_UNROLL for (int t = 0; t < T; ++t) c[t][r] = acc[r][t];
}

// Rows rr (1-4) against T activation rows.
template <class U, int T>
void dot_rows_any(int rr, int64_t nb, const RowScratch& s, int64_t n, const BlockQ8_K* const (&at)[T],
                  float* const (&c)[T]) {
  switch (rr) {
    case 4: return dot_rows<U, 4, T>(nb, s, n, at, c);
    case 3: return dot_rows<U, 3, T>(nb, s, n, at, c);
    case 2: return dot_rows<U, 2, T>(nb, s, n, at, c);
    default: return dot_rows<U, 1, T>(nb, s, n, at, c);
  }
}

// Tokens per pass over the scratch: with 4 rows, 2 leave the accumulators,
// one group's level registers and the activations in registers (4 spilled:
// qemu instructions per block and token IQ2_XS 76.8 -> 84.8, TQ1_0 40.9 -> 58.2).
template <class U>
constexpr int kScratchTokens = 2;

template <class U>
void gemm_scratch(int64_t n, const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nc, float* c,
                  size_t ldc) {
  thread_local RowScratch s;
  const Books& bk = books();
  const int64_t nb = n / kQKK;
  s.lv.resize(kScratchRows * n);
  s.sc.resize(kScratchRows * nb * 16);
  s.d.resize(kScratchRows * nb);
  for (int r0 = 0; r0 < nr; r0 += kScratchRows) {
    const int rr = std::min(kScratchRows, nr - r0);
    for (int r = 0; r < rr; ++r) {
      const auto* b = reinterpret_cast<const typename U::Block*>(w + (r0 + r) * ws);
      for (int64_t i = 0; i < nb; ++i) {
        Unpacked u;
        U::unpack(bk, b[i], u);
        store<U>(u, s.lv.data() + r * n + kQKK * i, s.sc.data() + (r * nb + i) * 16, s.d.data() + r * nb + i);
      }
    }
    // kScratchTokens<U> tokens at a time (the level registers serve them
    // all), the rest one by one.
    constexpr int T = kScratchTokens<U>;
    int t = 0;
    for (; t + T <= nc; t += T) {
      const BlockQ8_K* at[T];
      float* ct[T];
      SPOOL_UNROLL for (int j = 0; j < T; ++j) {
        at[j] = reinterpret_cast<const BlockQ8_K*>(a + (t + j) * as);
        ct[j] = c + (t + j) * ldc + r0;
      }
      dot_rows_any<U, T>(rr, nb, s, n, at, ct);
    }
    for (; t < nc; ++t) {
      const BlockQ8_K* const at[1] = {reinterpret_cast<const BlockQ8_K*>(a + t * as)};
      float* const ct[1] = {c + t * ldc + r0};
      dot_rows_any<U, 1>(rr, nb, s, n, at, ct);
    }
  }
  static_assert(kScratchRows == 4);
}

// Tiles of up to 4 activation rows decode in registers.
template <class U>
void gemm_tile(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nc, float* c, size_t ldc) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t nb = n / kQKK;
  switch (nc) {
    case 1: return gemm_direct<U, 1>(nb, wb, ws, nr, ab, as, c, ldc);
    case 2: return gemm_direct<U, 2>(nb, wb, ws, nr, ab, as, c, ldc);
    case 3: return gemm_direct<U, 3>(nb, wb, ws, nr, ab, as, c, ldc);
    case 4: return gemm_direct<U, 4>(nb, wb, ws, nr, ab, as, c, ldc);
    default: return gemm_scratch<U>(n, wb, ws, nr, ab, as, nc, c, ldc);
  }
}

template <class U>
float vec_dot(int64_t n, const void* w, const void* a) {
  float c;
  gemm_direct<U, 1>(n / kQKK, static_cast<const uint8_t*>(w), 0, 1, static_cast<const uint8_t*>(a), 0, &c, 1);
  return c;
}

template <class U>
void set(KernelTable& t, DType type) {
  TypeKernels& k = t.types[(uint32_t)type];
  k.vec_dot = vec_dot<U>;
  k.gemm_tile = gemm_tile<U>;
}

}  // namespace

void fill_neon_iq_kernels(KernelTable& t) {
  set<NeonIQ2_XXS>(t, DType::IQ2_XXS);
  set<NeonIQ2_XS>(t, DType::IQ2_XS);
  set<NeonIQ2_S>(t, DType::IQ2_S);
  set<NeonIQ3_XXS>(t, DType::IQ3_XXS);
  set<NeonIQ3_S>(t, DType::IQ3_S);
  set<NeonIQ1_S>(t, DType::IQ1_S);
  set<NeonIQ1_M>(t, DType::IQ1_M);
  set<NeonIQ4_XS>(t, DType::IQ4_XS);
  set<NeonTQ1_0>(t, DType::TQ1_0);
  set<NeonTQ2_0>(t, DType::TQ2_0);
}

}  // namespace spool::detail
