// Forms of two scalar functions that the LLVM JIT's loop vectorizer turns into packed
// code, for the fused CPU kernels (jit/llvm/bitcode/scalar_functions.cpp links them in
// place of the ops/pointwise_math.h / ops/philox.h forms; nothing else calls them):
//
// - erf_by_exp(float): glibc's libmvec has no erff and LLVM 19 maps only exp/log/sin/
//   cos/tan/pow to it, so erff stayed a scalar call per element (GELU's forward and
//   backward: 1.6 ns per element against 0.2 for a multiply). Below |x| = 1 the odd
//   Taylor series of erf to x^21 (truncation below 2e-9); above it 1 - exp(-a^2) R(a)
//   with R(a) = exp(a^2) erfc(a) a degree-12 polynomial in a - 2.5 (a Chebyshev
//   least-squares fit on [1, 4], relative error below 2e-7 evaluated in float), a
//   clamped to 4 (erf rounds to +-1 beyond 3.92). Within 2.5 ulp of erf (float64
//   reference on 4e5 points of [-6, 6] and 2e4 down to 1e-30; the eager xsimd loops'
//   xsimd::erf and glibc's erff are within 1); NaN stays NaN, +-inf gives +-1. Its
//   multiply-adds fuse where the target has FMA (half the instructions of the two
//   polynomials, which the vectorized loop evaluates for every element).
// - rand_value_narrow: philox::rand_value for outputs of at most 31 bits (float32,
//   float16, bfloat16), the same number, from a signed 32-bit convert (AVX2 has no
//   packed unsigned 64-bit convert, which kept rand scalar).
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/philox.h"

namespace kiln::cpu {

inline float erf_by_exp(float x) {
#if defined(__clang__)
  // The JIT's bitcode is compiled with -ffp-contract=off (the eager kernels' rounding);
  // this approximation rounds as it likes: the polynomials' multiply-adds fuse (FMA).
#pragma clang fp contract(fast)
#endif
  const float a = std::fabs(x);
  const float x2 = x * x;
  float p = 1.480719282e-08f;
  p = p * x2 - 1.636584469e-07f;
  p = p * x2 + 1.646211437e-06f;
  p = p * x2 - 1.492565036e-05f;
  p = p * x2 + 1.205533298e-04f;
  p = p * x2 - 8.548327023e-04f;
  p = p * x2 + 5.223977625e-03f;
  p = p * x2 - 2.686617065e-02f;
  p = p * x2 + 1.128379167e-01f;
  p = p * x2 - 3.761263890e-01f;
  p = p * x2 + 1.128379167e+00f;
  const float small = x * p;
  const float c = a > 4.0f ? 4.0f : a;  // NaN passes through
  const float t = c - 2.5f;
  float r = 1.065085091e-07f;
  r = r * t - 4.269337098e-07f;
  r = r * t + 9.528693485e-07f;
  r = r * t - 3.744433374e-06f;
  r = r * t + 1.617346030e-05f;
  r = r * t - 5.952952680e-05f;
  r = r * t + 2.108489829e-04f;
  r = r * t - 7.331467206e-04f;
  r = r * t + 2.467101960e-03f;
  r = r * t - 8.001696382e-03f;
  r = r * t + 2.493798782e-02f;
  r = r * t - 7.434733646e-02f;
  r = r * t + 2.108063643e-01f;
  const float big = std::copysign(1.0f - std::exp(-(c * c)) * r, x);
  return a < 1.0f ? small : big;
}

// philox::rand_value(seed, offset, index, bits) for bits <= 31.
// The word is picked by one select and a shift (philox::word_of's chain of selects kept
// the LLVM JIT's rand loops scalar: a dropout chain ran 5x slower).
inline double rand_value_narrow(uint64_t seed, uint64_t offset, uint64_t index, int bits) {
  const philox::Uint4 r = philox::draw(seed, offset, index >> 2);
  const uint64_t low = (static_cast<uint64_t>(r.y) << 32) | r.x;
  const uint64_t high = (static_cast<uint64_t>(r.w) << 32) | r.z;
  const uint32_t w = static_cast<uint32_t>(((index & 2) ? high : low) >> ((index & 1) * 32));
  return static_cast<double>(static_cast<int32_t>(w >> (32 - bits))) *
         (1.0 / static_cast<double>(1u << bits));
}

}  // namespace kiln::cpu
