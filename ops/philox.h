// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), the
// counter-based generator behind rand/randn. Draw c of a random op with state
// (seed, offset) uses counter (c_lo, c_hi, offset_lo, offset_hi) and key (seed_lo,
// seed_hi); rand_value says which draw and words an element takes (randn: draw i for
// element i). Every element is independent of the device: the CPU and CUDA kernels
// produce bit-identical uniform integers. The fused kernels call
// the same rand_value / randn_value: NVRTC includes this header (embedded in libkiln;
// it needs no standard library there) and the LLVM JIT links them as bitcode.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cmath>
#include <type_traits>

#include "runtime/dtype.h"
#endif
#include "runtime/macros.h"

namespace kiln::philox {

struct Uint4 {
  uint32_t x, y, z, w;
};

KILN_HD uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

KILN_HD Uint4 philox4x32_10(Uint4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(kM0, ctr.x, &hi0);
    uint32_t lo1 = mulhilo(kM1, ctr.z, &hi1);
    ctr = Uint4{hi1 ^ ctr.y ^ k0, lo1, hi0 ^ ctr.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

KILN_HD Uint4 draw(uint64_t seed, uint64_t offset, uint64_t index) {
  Uint4 ctr{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
            static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1) from 24 random bits (exact in float).
KILN_HD float uniform(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}
// Uniform in [0, 1) with 53 bits for double outputs.
KILN_HD double uniform_double(uint32_t a, uint32_t b) {
  uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ static_cast<uint64_t>(b >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Word k (0..3) of a draw.
KILN_HD uint32_t word_of(const Uint4& r, uint32_t k) {
  return k == 0 ? r.x : k == 1 ? r.y : k == 2 ? r.z : r.w;
}

// Element index's value of rand / randn, computed in double so that every dtype and
// device rounds the same number. rand draws on a grid of 2^-bits with bits the output
// type's precision (11 for float16, 8 for bfloat16, 24 for float32, 53 for float64), so
// converting it to that type is exact and never rounds up to 1. One draw serves four
// elements of up to 32 bits (element i: word i % 4 of draw i / 4, its top bits) and two
// of float64 (element i: words 2 (i % 2) and 2 (i % 2) + 1 of draw i / 2), so a kernel
// holding neighbouring elements draws once for them.
KILN_HD double rand_value(uint64_t seed, uint64_t offset, uint64_t index, int bits = 53) {
  if (bits <= 32) {
    const uint32_t w = word_of(draw(seed, offset, index >> 2), static_cast<uint32_t>(index & 3));
    return static_cast<double>(w >> (32 - bits)) * (1.0 / static_cast<double>(1ull << bits));
  }
  const Uint4 r = draw(seed, offset, index >> 1);
  const uint64_t word = (index & 1) ? (static_cast<uint64_t>(r.z) << 32) | r.w
                                    : (static_cast<uint64_t>(r.x) << 32) | r.y;
  return static_cast<double>(word >> (64 - bits)) * (1.0 / static_cast<double>(1ull << bits));
}
#if !defined(__CUDACC_RTC__)
template <class T>
constexpr int uniform_bits() {
  if constexpr (sizeof(T) == 8)
    return 53;
  else if constexpr (sizeof(T) == 4)
    return 24;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return 8;
  else
    return 11;
}
#endif
KILN_HD double randn_value(uint64_t seed, uint64_t offset, uint64_t index) {
  Uint4 r = draw(seed, offset, index);
  double u1 = uniform_double(r.x, r.y);
  double u2 = uniform_double(r.z, r.w);
  // Box-Muller; 1 - u1 lies in (0, 1] so the log is finite.
  return ::sqrt(-2.0 * ::log(1.0 - u1)) * ::cos(6.283185307179586 * u2);
}

}  // namespace kiln::philox
