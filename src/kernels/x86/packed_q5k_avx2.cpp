// Packed AVX2 kernels for Q5_K (the attention / down projections of Q5_K_M
// files): the AVX2 Q4_K design (x86/packed_kquant_avx2.cpp, 8 rows per
// group, maddubs + madd) plus the fifth bits, kept as Q5_K stores them (one
// byte per element position, bit s for sub-block s) and OR-ed in at bit 4.
#include "kernels/x86/packed_avx2.h"

#include <vector>

namespace spool::detail {
namespace {

using namespace packed2;


// pshufb control that turns each 32-bit lane's 4 bytes into the int16 pair
// (byte k0, byte k1), zero-extended (as in the Q4_K kernels).
struct Ctrl {
  alignas(32) int8_t b[32];
};
constexpr Ctrl pair_ctrl(int k0, int k1) {
  Ctrl c{};
  for (int i = 0; i < 32; ++i) {
    const int dword = (i % 16) / 4, e = i % 4;
    c.b[i] = (int8_t)(e % 2 == 0 ? 4 * dword + (e < 2 ? k0 : k1) : -128);
  }
  return c;
}
inline __m256i shuffle(__m256i v, const Ctrl& c) {
  return _mm256_shuffle_epi8(v, _mm256_load_si256((const __m256i*)c.b));
}
inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
inline __m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
// Keeps a chain of int16 adds a chain (GCC re-balances associative integer
// adds into a tree that keeps every product live and spills).
inline __m256i chain(__m256i v) {
  __asm__("" : "+x"(v));
  return v;
}

#define SPOOL_UNROLL _Pragma("GCC unroll 16")

// Levels 0..31 of sub-block S from a 4-byte chunk of packed nibbles (low:
// even S, high: odd S) and its fifth-bit bytes h (bit S of each byte). The
// 16-bit shifts move no wanted bit across a byte: bit 4 of a byte comes
// from bit S of the same byte.
template <int S>
inline __m256i level(__m256i raw, __m256i h, __m256i low4, __m256i bit4) {
  const __m256i lo = _mm256_and_si256(S % 2 ? _mm256_srli_epi16(raw, 4) : raw, low4);
  __m256i hi = h;
  if constexpr (S < 4) hi = _mm256_slli_epi16(h, 4 - S);
  if constexpr (S > 4) hi = _mm256_srli_epi16(h, S - 4);
  return _mm256_or_si256(lo, _mm256_and_si256(hi, bit4));
}

// Activation row (as Q4_K): [n int8][nb float d][nb x 8 int16 sums of 32].
// Group super-block (1408 bytes): d[8], dmin[8] fp16; the 12 scale bytes of
// each row as 3 ymm (lane r of ymm k: row r's bytes 4k..4k+3); qs[4][8] ymm:
// lane r of qs[p][m] = row r's qs bytes 32p+4m..+3 (low nibbles: sub-block
// 2p, high: 2p+1, chunk m); qh[8] ymm: lane r of qh[m] = row r's qh bytes
// 4m..4m+3 (bit s: the fifth bit of sub-block s, chunk m).
struct Q5KPacked {
  static constexpr int kTokens = 4;  // acc, tot and int16 sums per token: 12 of the 16 ymm
  static constexpr size_t kScales = 4 * kRows, kQs = kScales + 96, kQh = kQs + 32 * 32;
  static constexpr size_t kSuperBytes = kQh + 8 * 32;
  static constexpr int kBlockCols = kQKK;
  static constexpr size_t kSrcBytes = sizeof(BlockQ5_K), kBlockBytes = kSuperBytes;
  static size_t group_bytes(int64_t n) { return (size_t)(n / kQKK) * kSuperBytes; }
  static size_t act_bytes(int64_t n) { return round_up((size_t)n + 20 * (size_t)(n / kQKK), 32); }

  static void quantize_act(const float* x, void* out, int64_t n) {
    const int64_t nb = n / kQKK;
    const BlockQ8_K* tmp = packing::q8_k_row<avx2::quantize_q8_k>(x, n);  // the table's Q8_K
    auto* q = static_cast<int8_t*>(out);
    auto* d = reinterpret_cast<float*>(q + n);
    auto* sums = reinterpret_cast<int16_t*>(d + nb);
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(q + b * kQKK, tmp[b].qs, kQKK);
      d[b] = tmp[b].d;
      for (int s = 0; s < 8; ++s) sums[8 * b + s] = (int16_t)(tmp[b].bsums[2 * s] + tmp[b].bsums[2 * s + 1]);
    }
  }

  // The 6-bit scales of 8 rows as madd operands: sc16[s] holds each row's
  // scale of sub-block s in both int16 halves of its lane, m16[p] its mins
  // of sub-blocks 2p and 2p+1 (the Q4_K unpacking, in registers).
  static void expand_scales(const uint8_t* blk, __m256i (&sc16)[8], __m256i (&m16)[4]) {
    static constexpr Ctrl kDup[4] = {pair_ctrl(0, 0), pair_ctrl(1, 1), pair_ctrl(2, 2), pair_ctrl(3, 3)};
    static constexpr Ctrl kPair[2] = {pair_ctrl(0, 1), pair_ctrl(2, 3)};
    const __m256i a = load(blk + kScales), b = load(blk + kScales + 32), c = load(blk + kScales + 64);
    const __m256i six = _mm256_set1_epi8(0x3F), low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
    const __m256i sc[2] = {_mm256_and_si256(a, six),
                           _mm256_or_si256(_mm256_and_si256(c, low4), _mm256_and_si256(_mm256_srli_epi16(a, 2), top2))};
    const __m256i mn[2] = {_mm256_and_si256(b, six),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4),
                                           _mm256_and_si256(_mm256_srli_epi16(b, 2), top2))};
    SPOOL_UNROLL for (int s = 0; s < 8; ++s) sc16[s] = shuffle(sc[s / 4], kDup[s % 4]);
    SPOOL_UNROLL for (int p = 0; p < 4; ++p) m16[p] = shuffle(mn[p / 2], kPair[p % 2]);
  }

  // Sub-block S (8 chunks) for every token: a maddubs of levels 0..31 reaches
  // 2 x 31 x 128 = 7936, so 4 of them fit int16 before the scaling madd
  // widens them; two halves of 4 chunks. a[j]: token j's super-block.
  template <int C, int S>
  static void sub_block(const uint8_t* blk, const int8_t* const (&a)[C], const __m256i& sc16, __m256i (&tot)[C]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    const uint8_t* qs = blk + kQs + 256 * (S / 2);
    SPOOL_UNROLL for (int half = 0; half < 2; ++half) {
      __m256i sum[C];
      SPOOL_UNROLL for (int k = 0; k < 4; ++k) {
        const int m = 4 * half + k;
        const __m256i w = level<S>(load(qs + 32 * m), load(blk + kQh + 32 * m), low4, bit4);
        SPOOL_UNROLL for (int j = 0; j < C; ++j) {
          const __m256i p = _mm256_maddubs_epi16(w, bcast4(a[j] + 32 * S + 4 * m));
          sum[j] = k == 0 ? p : chain(_mm256_add_epi16(sum[j], p));
        }
      }
      SPOOL_UNROLL for (int j = 0; j < C; ++j) tot[j] = _mm256_add_epi32(tot[j], _mm256_madd_epi16(sum[j], sc16));
    }
  }

  template <int C>
  static void tile(int64_t n, const uint8_t* wg, const uint8_t* act, size_t as, float* c, size_t ldc, int n_valid) {
    const int64_t nb = n / kQKK;
    __m256 acc[C];
    SPOOL_UNROLL for (int j = 0; j < C; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wg + b * kSuperBytes;
      prefetch_weights<kSuperBytes / 64>(blk);  // every C, decode included, as for Q4_K
      __m256i sc16[8], m16[4];
      expand_scales(blk, sc16, m16);
      const __m256 wd = load_f16x8(blk), wdmin = load_f16x8(blk + 2 * kRows);
      // Minimums first (fewer live registers below): dmin * sum_s m_s * asum_s.
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const int8_t* q = reinterpret_cast<const int8_t*>(act + j * as);
        const float* d = reinterpret_cast<const float*>(q + n);
        const int16_t* sums = reinterpret_cast<const int16_t*>(d + nb) + 8 * b;
        __m256i mins = _mm256_madd_epi16(m16[0], bcast4(sums));
        SPOOL_UNROLL for (int p = 1; p < 4; ++p) {
          mins = _mm256_add_epi32(mins, _mm256_madd_epi16(m16[p], bcast4(sums + 2 * p)));
        }
        acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(wdmin, _mm256_set1_ps(d[b])), acc[j]);
      }
      __m256i tot[C];
      const int8_t* a[C];
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        tot[j] = _mm256_setzero_si256();
        a[j] = reinterpret_cast<const int8_t*>(act + j * as) + b * kQKK;
      }
      [&]<int... S>(std::integer_sequence<int, S...>) {
        (sub_block<C, S>(blk, a, sc16[S], tot), ...);
      }(std::make_integer_sequence<int, 8>());
      SPOOL_UNROLL for (int j = 0; j < C; ++j) {
        const float* d = reinterpret_cast<const float*>(act + j * as + n);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[j]), _mm256_mul_ps(wd, _mm256_set1_ps(d[b])), acc[j]);
      }
    }
    SPOOL_UNROLL for (int j = 0; j < C; ++j) store_rows(c + j * ldc, acc[j], n_valid);
  }

  static void pack_block(const uint8_t* src_block, int r, uint8_t* blk) {
    const auto& src = *reinterpret_cast<const BlockQ5_K*>(src_block);
    std::memcpy(blk + 2 * r, &src.d, 2);
    std::memcpy(blk + 2 * kRows + 2 * r, &src.dmin, 2);
    for (int k = 0; k < 3; ++k) std::memcpy(blk + kScales + 32 * k + 4 * r, src.scales + 4 * k, 4);
    for (int p = 0; p < 4; ++p)
      for (int m = 0; m < 8; ++m) std::memcpy(blk + kQs + (8 * p + m) * 32 + 4 * r, src.qs + 32 * p + 4 * m, 4);
    // Q5_K's qh byte l holds the fifth bits of position l in all 8 sub-blocks.
    for (int m = 0; m < 8; ++m) std::memcpy(blk + kQh + 32 * m + 4 * r, src.qh + 4 * m, 4);
  }
};

#undef SPOOL_UNROLL

}  // namespace

void fill_packed_q5k_avx2_kernels(KernelTable& t) {
  t.types[(uint32_t)DType::Q5_K].packed = Packer<Q5KPacked>::kernels();
}

}  // namespace spool::detail
