// Vectorized (xsimd) contiguous kernels for float32 and float64, one table per
// instruction set. Each arch file (ops/cpu/arch/pointwise_{avx512,avx2,sse2}.cpp) is
// compiled with its own -m flags and fills a KernelSet; kernels() picks the best set the
// CPU supports once, at first use (never -march=native). KILN_CPU_ARCH=sse2|avx2|avx512
// caps the choice (for testing the lower paths; read once).
//
// Every kernel takes contiguous arrays of n elements (any n, any alignment; the arrays
// may be the same memory for in-place use) and computes every element with the vector
// code, the tail included, so a value never depends on its position in the array. The
// math is pm:: functors from ops/pointwise_math.h, instantiated on xsimd::batch.
#pragma once

#include <cstdint>

#include "ops/registry.h"

namespace kiln::cpu::simd {

template <class T>
struct KernelTable {
  using Unary = void (*)(const T* x, T* out, int64_t n);
  using Binary = void (*)(const T* a, const T* b, T* out, int64_t n);
  using Compare = void (*)(const T* a, const T* b, bool* out, int64_t n);
  // out = min(max(x, lo), hi) with NaN kept; pass -inf / +inf for a missing bound.
  using Clamp = void (*)(const T* x, T* out, int64_t n, T lo, T hi);
  // One row of n >= 1 elements: out = softmax(x), or log_softmax(x) when `log`: the row
  // maximum is subtracted before exp, the exp sum accumulates in double (per 64 elements
  // in T lanes first), a row holding a NaN gives NaNs. out may be x.
  using SoftmaxRow = void (*)(const T* x, T* out, int64_t n, bool log);

  Unary unary[kNumOps] = {};      // every Unary-family op but Cast; Gelu is the erf form
  Unary gelu_tanh = nullptr;      // Gelu with attrs.approximate_tanh
  Binary binary[kNumOps] = {};    // Add, Sub, Mul, Div, Pow, Maximum, Minimum
  Compare compare[kNumOps] = {};  // Eq, Ne, Lt, Le, Gt, Ge
  Clamp clamp = nullptr;
  SoftmaxRow softmax_row = nullptr;
};

struct KernelSet {
  const char* arch = "none";  // "avx512", "avx2", "sse2"
  KernelTable<float> f32;
  KernelTable<double> f64;
};

// The set for this CPU, chosen once.
const KernelSet& kernels();

template <class T>
const KernelTable<T>& table();
template <>
inline const KernelTable<float>& table<float>() {
  return kernels().f32;
}
template <>
inline const KernelTable<double>& table<double>() {
  return kernels().f64;
}

// Defined by the arch files.
void fill_avx512(KernelSet* set);
void fill_avx2(KernelSet* set);
void fill_sse2(KernelSet* set);

}  // namespace kiln::cpu::simd
