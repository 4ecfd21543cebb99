// The vector kernels behind simd::KernelTable, written once as templates over the
// xsimd architecture. Include ONLY from the arch files (pointwise_<arch>.cpp), each
// compiled with its own -m flags. Everything here has internal linkage (anonymous
// namespace) so that code built for one instruction set can never be merged by the
// linker with another file's copy and then run on a CPU that lacks it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

// xsimd 8.1 defines the scalar helpers of sin/cos argument reduction as plain inline
// functions (xsimd::detail::__kernel_rem_pio2, __ieee754_rem_pio2): each arch file
// would emit a weak copy built with its own -m flags and the linker would keep one for
// all of them (an AVX copy reached from the SSE2 path). Each arch file names them apart.
#ifndef KILN_SIMD_ARCH_TAG
#error "define KILN_SIMD_ARCH_TAG (avx512, avx2, sse2) before including pointwise_simd.h"
#endif
#define KILN_SIMD_CONCAT_IMPL(a, b) a##_kiln_##b
#define KILN_SIMD_CONCAT(a, b) KILN_SIMD_CONCAT_IMPL(a, b)
#define __kernel_rem_pio2 KILN_SIMD_CONCAT(__kernel_rem_pio2, KILN_SIMD_ARCH_TAG)
#define __ieee754_rem_pio2 KILN_SIMD_CONCAT(__ieee754_rem_pio2, KILN_SIMD_ARCH_TAG)

// GCC 12 warns "__Y may be used uninitialized" inside its own avx512fintrin.h
// (_mm512_undefined_*, GCC PR 105593) when xsimd's AVX-512 code is inlined at -O2+.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <xsimd/xsimd.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#undef __kernel_rem_pio2
#undef __ieee754_rem_pio2

#include "ops/cpu/simd.h"
#include "ops/pointwise_math.h"

namespace kiln::cpu::simd {
namespace {  // NOLINT(google-build-namespaces): see the header comment

// ---- functor wrappers where pm:: on a batch does not give the scalar path's answer
//
// xsimd 8.1 implements batch != with an ordered compare on AVX and AVX-512
// (_CMP_NEQ_OQ: NaN != NaN is false) but an unordered one on SSE2, so `x != x` is no
// NaN test and `a != b` is wrong for NaN there. pm::'s relu (select(x > 0, x, 0)),
// maximum/minimum (NaN tests by a != a) and ne are therefore restated with
// xsimd::isnan and !(a == b); every other functor is used as is.

template <OpId Op>
struct VectorUnary {
  template <class B>
  B operator()(B x) const {
    return pm::UnaryFn<Op>{}(x);
  }
};
template <>
struct VectorUnary<OpId::Relu> {  // keeps NaN, like the scalar form and PyTorch
  template <class B>
  B operator()(B x) const {
    return xsimd::select(x > B(0) || xsimd::isnan(x), x, B(0));
  }
};

// xsimd's float exp overflows for x > 88.376, libm's (and the JITs') only past 88.723:
// lanes that came out inf from a finite x are recomputed with libm.
template <>
struct VectorUnary<OpId::Exp> {
  template <class B>
  B operator()(B x) const {
    const B r = pm::UnaryFn<OpId::Exp>{}(x);
    if (!xsimd::any(xsimd::isinf(r) && !xsimd::isinf(x))) return r;
    using T = typename B::value_type;
    T xs[B::size], rs[B::size];
    x.store_unaligned(xs);
    r.store_unaligned(rs);
    for (size_t i = 0; i < B::size; ++i)
      if (std::isinf(rs[i]) && !std::isinf(xs[i])) rs[i] = std::exp(xs[i]);
    return B::load_unaligned(rs);
  }
};
template <>
struct VectorUnary<OpId::Neg> {  // xsimd's AVX-512 neg is 0 - x: it turns -(+0) into +0
  template <class B>
  B operator()(B x) const {
    return x * B(-1);
  }
};

template <OpId Op>
struct VectorBinary {
  template <class B>
  auto operator()(B a, B b) const {
    return pm::BinaryFn<Op>{}(a, b);
  }
};
template <>
struct VectorBinary<OpId::Ne> {
  template <class B>
  auto operator()(B a, B b) const {
    return !(a == b);
  }
};
// NaN in either operand gives NaN; of +0 and -0 maximum is +0 and minimum -0 (IEEE
// 754-2019, and the JITs' llvm.maximum / llvm.minimum): equal operands are combined
// bitwise, which only differs from either for a pair of signed zeros.
template <>
struct VectorBinary<OpId::Maximum> {
  template <class B>
  B operator()(B a, B b) const {
    const B m = xsimd::select(a == b, a & b, xsimd::max(a, b));
    return xsimd::select(xsimd::isnan(a), a, xsimd::select(xsimd::isnan(b), b, m));
  }
};
template <>
struct VectorBinary<OpId::Minimum> {
  template <class B>
  B operator()(B a, B b) const {
    const B m = xsimd::select(a == b, a | b, xsimd::min(a, b));
    return xsimd::select(xsimd::isnan(a), a, xsimd::select(xsimd::isnan(b), b, m));
  }
};

// xsimd's batch pow is exp(y * log|x|) with sign fix-ups: it gets IEEE's special cases
// wrong (pow(0, 0) and pow(0, -1) give 0, pow(NaN, 0) gives NaN) and loses ulps as
// |y log x| grows. Each lane calls the scalar pow (libm), the answer of every other path
// (the scalar loops, the LLVM and CUDA code generators).
template <>
struct VectorBinary<OpId::Pow> {
  template <class B>
  B operator()(B a, B b) const {
    using T = typename B::value_type;
    T x[B::size], y[B::size];
    a.store_unaligned(x);
    b.store_unaligned(y);
    for (size_t i = 0; i < B::size; ++i) x[i] = pm::BinaryFn<OpId::Pow>{}(x[i], y[i]);
    return B::load_unaligned(x);
  }
};

// ---- loops over contiguous arrays; the tail goes through one padded batch

// Copies a tail of fewer than one batch (a plain loop: cheaper than memcpy calls here).
template <class T>
inline void copy_tail(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

template <class T, class Arch, class F>
inline void map1(const T* x, T* out, int64_t n, F f) {
  using B = xsimd::batch<T, Arch>;
  constexpr int64_t W = static_cast<int64_t>(B::size);
  int64_t i = 0;
  for (; i + W <= n; i += W) f(B::load_unaligned(x + i)).store_unaligned(out + i);
  if (i < n) {
    alignas(64) T buf[W] = {};
    copy_tail(buf, x + i, n - i);
    f(B::load_aligned(buf)).store_aligned(buf);
    copy_tail(out + i, buf, n - i);
  }
}

template <class T, class Arch, class F>
inline void map2(const T* a, const T* b, T* out, int64_t n, F f) {
  using B = xsimd::batch<T, Arch>;
  constexpr int64_t W = static_cast<int64_t>(B::size);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    f(B::load_unaligned(a + i), B::load_unaligned(b + i)).store_unaligned(out + i);
  if (i < n) {
    alignas(64) T abuf[W] = {}, bbuf[W] = {};
    copy_tail(abuf, a + i, n - i);
    copy_tail(bbuf, b + i, n - i);
    f(B::load_aligned(abuf), B::load_aligned(bbuf)).store_aligned(abuf);
    copy_tail(out + i, abuf, n - i);
  }
}

template <class T, class Arch, class F>
inline void compare2(const T* a, const T* b, bool* out, int64_t n, F f) {
  using B = xsimd::batch<T, Arch>;
  constexpr int64_t W = static_cast<int64_t>(B::size);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    f(B::load_unaligned(a + i), B::load_unaligned(b + i)).store_unaligned(out + i);
  if (i < n) {
    alignas(64) T abuf[W] = {}, bbuf[W] = {};
    alignas(64) bool obuf[W];
    copy_tail(abuf, a + i, n - i);
    copy_tail(bbuf, b + i, n - i);
    f(B::load_aligned(abuf), B::load_aligned(bbuf)).store_aligned(obuf);
    copy_tail(out + i, obuf, n - i);
  }
}

// ---- the table entries

template <class T, class Arch, OpId Op>
void unary_kernel(const T* x, T* out, int64_t n) {
  map1<T, Arch>(x, out, n, VectorUnary<Op>{});
}
template <class T, class Arch, class Fn>
void unary_functor_kernel(const T* x, T* out, int64_t n) {
  map1<T, Arch>(x, out, n, Fn{});
}
template <class T, class Arch, OpId Op>
void binary_kernel(const T* a, const T* b, T* out, int64_t n) {
  map2<T, Arch>(a, b, out, n, VectorBinary<Op>{});
}
template <class T, class Arch, OpId Op>
void compare_kernel(const T* a, const T* b, bool* out, int64_t n) {
  compare2<T, Arch>(a, b, out, n, VectorBinary<Op>{});
}
template <class T, class Arch>
void clamp_kernel(const T* x, T* out, int64_t n, T lo, T hi) {
  using B = xsimd::batch<T, Arch>;
  const B vlo(lo), vhi(hi);
  // Comparisons with NaN are false, so a NaN input passes through unchanged.
  map1<T, Arch>(x, out, n, [vlo, vhi](B v) {
    v = xsimd::select(v < vlo, vlo, v);
    return xsimd::select(v > vhi, vhi, v);
  });
}

template <class T, class Arch>
void softmax_row_kernel(const T* x, T* out, int64_t n, bool log) {
  using B = xsimd::batch<T, Arch>;
  constexpr int64_t W = static_cast<int64_t>(B::size);
  const VectorBinary<OpId::Maximum> maximum;
  const VectorUnary<OpId::Exp> exp;
  // The maximum: NaN-propagating lanes, then across them.
  T max = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  if (n >= W) {
    B m = B::load_unaligned(x);
    for (i = W; i + W <= n; i += W) m = maximum(m, B::load_unaligned(x + i));
    alignas(64) T lanes[W];
    m.store_aligned(lanes);
    for (int64_t l = 0; l < W; ++l) max = pm::BinaryFn<OpId::Maximum>{}(max, lanes[l]);
  }
  for (; i < n; ++i) max = pm::BinaryFn<OpId::Maximum>{}(max, x[i]);
  // exp(x - max) (kept in out for softmax), summed in T lanes per block of 64 elements
  // and across blocks in double.
  const B vmax(max);
  double sum = 0;
  constexpr int64_t kBlock = 64;
  i = 0;
  for (; i + W <= n;) {
    B acc(T(0));
    const int64_t stop = std::min(n, i + kBlock);
    for (; i + W <= stop; i += W) {
      const B e = exp(B::load_unaligned(x + i) - vmax);
      if (!log) e.store_unaligned(out + i);
      acc += e;
    }
    sum += static_cast<double>(xsimd::hadd(acc));
  }
  for (; i < n; ++i) {
    const T e = pm::UnaryFn<OpId::Exp>{}(x[i] - max);
    if (!log) out[i] = e;
    sum += static_cast<double>(e);
  }
  if (log) {
    const B shift(max + static_cast<T>(std::log(sum)));
    map1<T, Arch>(x, out, n, [shift](B v) { return v - shift; });
  } else {
    const B scale(static_cast<T>(1.0 / sum));
    map1<T, Arch>(out, out, n, [scale](B v) { return v * scale; });
  }
}

// Every op of ops/ops.def with a functor in ops/pointwise_math.h gets its entry (gelu's
// row is the erf form); comparisons write bool.
template <class T, class Arch>
void fill_table(KernelTable<T>& t) {
#define KILN_OP(Id, name, family, rule)                                           \
  if constexpr (pm::kHasUnaryFn<OpId::Id>)                                        \
    t.unary[static_cast<int>(OpId::Id)] = &unary_kernel<T, Arch, OpId::Id>;       \
  if constexpr (pm::kHasBinaryFn<OpId::Id> && DTypeRule::rule == DTypeRule::Bool) \
    t.compare[static_cast<int>(OpId::Id)] = &compare_kernel<T, Arch, OpId::Id>;   \
  else if constexpr (pm::kHasBinaryFn<OpId::Id>)                                  \
    t.binary[static_cast<int>(OpId::Id)] = &binary_kernel<T, Arch, OpId::Id>;
#include "ops/ops.def"
#undef KILN_OP
  t.gelu_tanh = &unary_functor_kernel<T, Arch, pm::GeluTanh>;
  t.clamp = &clamp_kernel<T, Arch>;
  t.softmax_row = &softmax_row_kernel<T, Arch>;
}

template <class Arch>
void fill_set(KernelSet* set, const char* name) {
  set->arch = name;
  fill_table<float, Arch>(set->f32);
  fill_table<double, Arch>(set->f64);
}

}  // namespace
}  // namespace kiln::cpu::simd
