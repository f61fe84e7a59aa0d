// The fixed codebooks of the IQ types, expanded once from their compact
// encoding (iq_codebooks_data.inc, written by scripts/gen_iq_codebooks.py):
// grids of lattice points (one byte per weight), the 128 sign patterns of 8
// weights with even parity, and IQ4's 16 non-linear levels.
#pragma once

#include <cstdint>

namespace spool {

struct IqCodebooks {
  uint8_t iq2xxs[256][8];   // levels 8, 25, 43
  uint8_t iq2xs[512][8];
  uint8_t iq2s[1024][8];
  uint8_t iq3xxs[256][4];   // levels 4 .. 62
  uint8_t iq3s[512][4];     // levels 1 .. 15, odd
  int8_t iq1s[2048][8];     // levels -1, 0, 1
  // Sign pattern i (7 bits) completed to even parity by bit 7: bit j set means
  // weight j is negated.
  uint8_t signs[128];
  int8_t iq4nl[16];         // IQ4_NL / IQ4_XS levels
  float iq1_delta;          // IQ1_S / IQ1_M: each point is shifted by +-this
};

// Built on first use (thread-safe); the same object for the process' life.
const IqCodebooks& iq_codebooks();

// FNV-1a of the expanded grids and signs, against the hashes the generator
// recorded from the format's tables; false if any differs (a test checks it).
bool iq_codebooks_match_reference();

}  // namespace spool
