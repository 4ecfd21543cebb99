// The math of every pointwise op, written once. Each functor is generic over the
// value type so that the same definition serves scalar CPU loops (float, double,
// int32, int64), the xsimd vector loops (xsimd::batch, found by argument-dependent
// lookup), the CUDA kernels (host+device functions) and both JITs: the NVRTC source of
// every fused CUDA kernel includes this header (embedded in libkiln at build time) and
// calls UnaryFn<OpId::X> / BinaryFn<OpId::X>; the LLVM JIT links the same functors,
// compiled to bitcode by clang (jit/llvm/bitcode/scalar_functions.cpp), into each kernel.
// 16-bit floats compute in float.
//
// NVRTC has no standard library: this header uses only runtime/macros.h, ops/op_id.h
// and the C math functions every target has (expf, ...), with its own small traits.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cmath>
#endif

#include "ops/op_id.h"
#include "runtime/macros.h"

namespace kiln::pm {

// ---- traits (std::is_floating_point and friends, which NVRTC lacks)
template <class T>
struct IsFloat {
  static constexpr bool value = false;
};
template <>
struct IsFloat<float> {
  static constexpr bool value = true;
};
template <>
struct IsFloat<double> {
  static constexpr bool value = true;
};
template <class T>
struct IsInt {
  static constexpr bool value = false;
};
template <>
struct IsInt<int32_t> {
  static constexpr bool value = true;
};
template <>
struct IsInt<int64_t> {
  static constexpr bool value = true;
};
template <class T>
struct IsBool {
  static constexpr bool value = false;
};
template <>
struct IsBool<bool> {
  static constexpr bool value = true;
};
template <class T>
constexpr bool kIsFloat = IsFloat<T>::value;
template <class T>  // else a SIMD batch
constexpr bool kIsScalar = IsFloat<T>::value || IsInt<T>::value || IsBool<T>::value;
template <class T>
struct Unsigned;
template <>
struct Unsigned<int32_t> {
  using type = uint32_t;
};
template <>
struct Unsigned<int64_t> {
  using type = uint64_t;
};

// Scalar building blocks (host and device). Vector types use xsimd's overloads.
KILN_HD float exp(float x) { return ::expf(x); }
KILN_HD double exp(double x) { return ::exp(x); }
KILN_HD float log(float x) { return ::logf(x); }
KILN_HD double log(double x) { return ::log(x); }
KILN_HD float sqrt(float x) { return ::sqrtf(x); }
KILN_HD double sqrt(double x) { return ::sqrt(x); }
KILN_HD float sin(float x) { return ::sinf(x); }
KILN_HD double sin(double x) { return ::sin(x); }
KILN_HD float cos(float x) { return ::cosf(x); }
KILN_HD double cos(double x) { return ::cos(x); }
KILN_HD float erf(float x) { return ::erff(x); }
KILN_HD double erf(double x) { return ::erf(x); }
KILN_HD float log1p(float x) { return ::log1pf(x); }
KILN_HD double log1p(double x) { return ::log1p(x); }
KILN_HD float pow(float x, float y) { return ::powf(x, y); }
KILN_HD double pow(double x, double y) { return ::pow(x, y); }
KILN_HD float abs(float x) { return ::fabsf(x); }
KILN_HD double abs(double x) { return ::fabs(x); }
KILN_HD int32_t abs(int32_t x) { return x < 0 ? -x : x; }
KILN_HD int64_t abs(int64_t x) { return x < 0 ? -x : x; }
KILN_HD bool signbit(float x) { return ::copysignf(1.0f, x) < 0; }
KILN_HD bool signbit(double x) { return ::copysign(1.0, x) < 0; }

// float tanh from exp, the form the LLVM JIT can vectorize (glibc's libmvec has no
// tanhf, and LLVM 19 maps only exp/log/sin/cos/tan/pow to it): (1 - e) / (1 + e) with
// e = exp(-2|x|), and the odd Taylor series to x^13 below |x| = 0.3 (error below 1e-9
// there), where the quotient would cancel. Within 2 ulp of tanhf elsewhere. CUDA device
// code keeps tanhf (no vectorizer to feed); the xsimd loops use xsimd::tanh.
KILN_HD float tanh_by_exp(float x) {
  const float a = ::fabsf(x);
  const float e = ::expf(a * -2.0f);
  const float big = ::copysignf((1.0f - e) / (1.0f + e), x);
  const float x2 = x * x;
  float p = static_cast<float>(21844.0 / 6081075);
  p = p * x2 + static_cast<float>(-1382.0 / 155925);
  p = p * x2 + static_cast<float>(62.0 / 2835);
  p = p * x2 + static_cast<float>(-17.0 / 315);
  p = p * x2 + static_cast<float>(2.0 / 15);
  p = p * x2 + static_cast<float>(-1.0 / 3);
  const float small = x + x * x2 * p;
  return a < 0.3f ? small : big;
}
KILN_HD float tanh(float x) {
#if defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__)
  return ::tanhf(x);
#else
  return tanh_by_exp(x);
#endif
}
KILN_HD double tanh(double x) { return ::tanh(x); }

// max/min propagate NaN like PyTorch's maximum/minimum, and order the zeros (maximum of
// +0 and -0 is +0, minimum -0) like IEEE 754-2019, the xsimd loops and llvm.maximum.
template <class T>
KILN_HD T max(T a, T b) {
  if constexpr (kIsFloat<T>) {
    if (a != a) return a;
    if (b != b) return b;
    if (a == b) return signbit(a) ? b : a;
  }
  return a > b ? a : b;
}
template <class T>
KILN_HD T min(T a, T b) {
  if constexpr (kIsFloat<T>) {
    if (a != a) return a;
    if (b != b) return b;
    if (a == b) return signbit(a) ? a : b;
  }
  return a < b ? a : b;
}
// Integer power by squaring (PyTorch keeps int ** int integral; negative exponents give 0
// except for bases 1 and -1). Computed unsigned: a power that overflows wraps around (two's
// complement) instead of being undefined, and the base is not squared past the last bit.
template <class T>
KILN_HD T ipow(T base, T e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  using U = typename Unsigned<T>::type;
  U r = 1, b = static_cast<U>(base);
  while (e) {
    if (e & 1) r *= b;
    e >>= 1;
    if (e) b *= b;
  }
  return static_cast<T>(r);
}

// ---- unary functors: UnaryFn<OpId::X>{}(x). T is float/double/int or a SIMD batch.
template <OpId Op>
struct UnaryFn;
template <OpId Op>
constexpr bool kHasUnaryFn = false;  // whether UnaryFn<Op> exists
#define KILN_UNARY_FN(Id, expr)                \
  template <>                                  \
  constexpr bool kHasUnaryFn<OpId::Id> = true; \
  template <>                                  \
  struct UnaryFn<OpId::Id> {                   \
    template <class T>                         \
    KILN_HD T operator()(T x) const {          \
      using pm::exp;                           \
      using pm::log;                           \
      using pm::sqrt;                          \
      using pm::sin;                           \
      using pm::cos;                           \
      using pm::tanh;                          \
      using pm::erf;                           \
      using pm::log1p;                         \
      using pm::abs;                           \
      return expr;                             \
    }                                          \
  };
KILN_UNARY_FN(Neg, -x)
KILN_UNARY_FN(Abs, abs(x))
KILN_UNARY_FN(Exp, exp(x))
KILN_UNARY_FN(Log, log(x))
KILN_UNARY_FN(Sqrt, sqrt(x))
KILN_UNARY_FN(Rsqrt, T(1) / sqrt(x))
KILN_UNARY_FN(Sin, sin(x))
KILN_UNARY_FN(Cos, cos(x))
KILN_UNARY_FN(Tanh, tanh(x))
KILN_UNARY_FN(Sigmoid, T(1) / (T(1) + exp(-x)))
KILN_UNARY_FN(Silu, x / (T(1) + exp(-x)))
KILN_UNARY_FN(Reciprocal, T(1) / x)
KILN_UNARY_FN(Erf, erf(x))
KILN_UNARY_FN(Log1p, log1p(x))
#undef KILN_UNARY_FN
// relu and gelu need comparisons / an attribute, so they are spelled out.
template <>
constexpr bool kHasUnaryFn<OpId::Relu> = true;
template <>
struct UnaryFn<OpId::Relu> {
  template <class T>
  KILN_HD T operator()(T x) const {
    if constexpr (kIsScalar<T>)
      return x > T(0) ? x : (x != x ? x : T(0));
    else
      return select(x > T(0), x, T(0));  // xsimd::select by ADL
  }
};
struct GeluErf {
  template <class T>
  KILN_HD T operator()(T x) const {
    using pm::erf;
    return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
  }
};
struct GeluTanh {
  template <class T>
  KILN_HD T operator()(T x) const {
    using pm::tanh;
    return T(0.5) * x * (T(1) + tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
  }
};
// gelu's row is the erf form; attrs.approximate_tanh picks GeluTanh (the JITs carry it
// as KNode::approximate).
template <>
constexpr bool kHasUnaryFn<OpId::Gelu> = true;
template <>
struct UnaryFn<OpId::Gelu> : GeluErf {};

// ---- binary functors: BinaryFn<OpId::X>{}(a, b). Comparisons return bool.
template <OpId Op>
struct BinaryFn;
template <OpId Op>
constexpr bool kHasBinaryFn = false;  // whether BinaryFn<Op> exists
#define KILN_BINARY_FN(Id, expr)                \
  template <>                                   \
  constexpr bool kHasBinaryFn<OpId::Id> = true; \
  template <>                                   \
  struct BinaryFn<OpId::Id> {                   \
    template <class T>                          \
    KILN_HD auto operator()(T a, T b) const {   \
      return expr;                              \
    }                                           \
  };
KILN_BINARY_FN(Add, a + b)
KILN_BINARY_FN(Sub, a - b)
KILN_BINARY_FN(Mul, a* b)
KILN_BINARY_FN(Div, a / b)
KILN_BINARY_FN(Eq, a == b)
KILN_BINARY_FN(Ne, a != b)
KILN_BINARY_FN(Lt, a < b)
KILN_BINARY_FN(Le, a <= b)
KILN_BINARY_FN(Gt, a > b)
KILN_BINARY_FN(Ge, a >= b)
#undef KILN_BINARY_FN
template <>
constexpr bool kHasBinaryFn<OpId::Pow> = true;
template <>
struct BinaryFn<OpId::Pow> {
  template <class T>
  KILN_HD T operator()(T a, T b) const {
    if constexpr (IsInt<T>::value)
      return ipow(a, b);
    else {
      // x ** 2 as x * x (PyTorch's special case too; the correctly rounded square either
      // way): a loop-invariant test that the compilers unswitch, sparing pow on every element
      using pm::pow;
      return b == T(2) ? a * a : pow(a, b);
    }
  }
};
template <>
constexpr bool kHasBinaryFn<OpId::Maximum> = true;
template <>
struct BinaryFn<OpId::Maximum> {
  template <class T>
  KILN_HD T operator()(T a, T b) const {
    if constexpr (kIsScalar<T>)
      return pm::max(a, b);
    else
      return select(a != a, a, select(b != b, b, max(a, b)));  // xsimd, NaN-propagating
  }
};
template <>
constexpr bool kHasBinaryFn<OpId::Minimum> = true;
template <>
struct BinaryFn<OpId::Minimum> {
  template <class T>
  KILN_HD T operator()(T a, T b) const {
    if constexpr (kIsScalar<T>)
      return pm::min(a, b);
    else
      return select(a != a, a, select(b != b, b, min(a, b)));
  }
};

#if !defined(__CUDACC_RTC__)  // host code: NVRTC compiles device functions only
// Calls f(OpTag<Op>{}) for an op id known only at run time, if the op has a functor;
// returns whether it had one. The rows come from ops/ops.def.
template <OpId Op>
struct OpTag {
  static constexpr OpId value = Op;
};
template <class F>
bool visit_unary_op(OpId op, F&& f) {
  switch (op) {
#define KILN_OP(Id, name, family, rule)    \
  case OpId::Id:                           \
    if constexpr (kHasUnaryFn<OpId::Id>) { \
      f(OpTag<OpId::Id>{});                \
      return true;                         \
    }                                      \
    return false;
#include "ops/ops.def"
#undef KILN_OP
    default:
      return false;
  }
}
template <class F>
bool visit_binary_op(OpId op, F&& f) {
  switch (op) {
#define KILN_OP(Id, name, family, rule)     \
  case OpId::Id:                            \
    if constexpr (kHasBinaryFn<OpId::Id>) { \
      f(OpTag<OpId::Id>{});                 \
      return true;                          \
    }                                       \
    return false;
#include "ops/ops.def"
#undef KILN_OP
    default:
      return false;
  }
}
#endif

}  // namespace kiln::pm
