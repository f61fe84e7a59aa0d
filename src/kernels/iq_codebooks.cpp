// Expands the IQ codebooks; see iq_codebooks.h.
#include "kernels/iq_codebooks.h"

#include <cstddef>

namespace spool {

namespace {

#include "kernels/iq_codebooks_data.inc"  // NOLINT: generated tables, inside this namespace

template <size_t N, size_t W, size_t L>
void expand(uint8_t (&out)[N][W], const uint16_t (&codes)[N], const uint8_t (&levels)[L]) {
  for (size_t i = 0; i < N; ++i) {
    unsigned c = codes[i];
    for (size_t j = 0; j < W; ++j) {
      out[i][j] = levels[c % L];
      c /= L;
    }
  }
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

IqCodebooks build() {
  IqCodebooks b{};
  expand(b.iq2xxs, kIq2xxsGridCodes, kIq2xxsGridLevels);
  expand(b.iq2xs, kIq2xsGridCodes, kIq2xsGridLevels);
  expand(b.iq2s, kIq2sGridCodes, kIq2sGridLevels);
  expand(b.iq3xxs, kIq3xxsGridCodes, kIq3xxsGridLevels);
  expand(b.iq3s, kIq3sGridCodes, kIq3sGridLevels);
  uint8_t iq1s[2048][8];
  expand(iq1s, kIq1sGridCodes, kIq1sGridLevels);
  for (int i = 0; i < 2048; ++i)
    for (int j = 0; j < 8; ++j) b.iq1s[i][j] = (int8_t)iq1s[i][j];
  for (int i = 0; i < 128; ++i) b.signs[i] = (uint8_t)(i | ((__builtin_popcount(i) & 1) << 7));
  for (int i = 0; i < 16; ++i) b.iq4nl[i] = kIq4nlLevels[i];
  b.iq1_delta = kIq1Delta;
  return b;
}

}  // namespace

const IqCodebooks& iq_codebooks() {
  static const IqCodebooks books = build();
  return books;
}

bool iq_codebooks_match_reference() {
  const IqCodebooks& b = iq_codebooks();
  return fnv1a(b.iq2xxs, sizeof b.iq2xxs) == kIq2xxsGridHash && fnv1a(b.iq2xs, sizeof b.iq2xs) == kIq2xsGridHash &&
         fnv1a(b.iq2s, sizeof b.iq2s) == kIq2sGridHash && fnv1a(b.iq3xxs, sizeof b.iq3xxs) == kIq3xxsGridHash &&
         fnv1a(b.iq3s, sizeof b.iq3s) == kIq3sGridHash && fnv1a(b.iq1s, sizeof b.iq1s) == kIq1sGridHash &&
         fnv1a(b.signs, sizeof b.signs) == kIq2SignsHash;
}

}  // namespace spool
