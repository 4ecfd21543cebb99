// The math of every pointwise op, written once. Each functor is generic over the
// value type so that the same definition serves scalar CPU loops (float, double,
// int32, int64), the xsimd vector loops (xsimd::batch, found by argument-dependent
// lookup) and the CUDA kernels (host+device functions). 16-bit floats compute in float.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/registry.h"
#include "runtime/macros.h"

namespace kiln::pm {

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
KILN_HD float tanh(float x) { return ::tanhf(x); }
KILN_HD double tanh(double x) { return ::tanh(x); }
KILN_HD float erf(float x) { return ::erff(x); }
KILN_HD double erf(double x) { return ::erf(x); }
KILN_HD float pow(float x, float y) { return ::powf(x, y); }
KILN_HD double pow(double x, double y) { return ::pow(x, y); }
KILN_HD float abs(float x) { return ::fabsf(x); }
KILN_HD double abs(double x) { return ::fabs(x); }
KILN_HD int32_t abs(int32_t x) { return x < 0 ? -x : x; }
KILN_HD int64_t abs(int64_t x) { return x < 0 ? -x : x; }
// max/min propagate NaN like PyTorch's maximum/minimum.
template <class T>
KILN_HD T max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}
template <class T>
KILN_HD T min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
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
  using U = std::make_unsigned_t<T>;
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
#define KILN_UNARY_FN(Id, expr)       \
  template <>                         \
  struct UnaryFn<OpId::Id> {          \
    template <class T>                \
    KILN_HD T operator()(T x) const { \
      using pm::exp;                  \
      using pm::log;                  \
      using pm::sqrt;                 \
      using pm::sin;                  \
      using pm::cos;                  \
      using pm::tanh;                 \
      using pm::erf;                  \
      using pm::abs;                  \
      return expr;                    \
    }                                 \
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
#undef KILN_UNARY_FN
// relu and gelu need comparisons / an attribute, so they are spelled out.
template <>
struct UnaryFn<OpId::Relu> {
  template <class T>
  KILN_HD T operator()(T x) const {
    if constexpr (std::is_arithmetic_v<T>)
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

// ---- binary functors: BinaryFn<OpId::X>{}(a, b). Comparisons return bool.
template <OpId Op>
struct BinaryFn;
#define KILN_BINARY_FN(Id, expr)              \
  template <>                                 \
  struct BinaryFn<OpId::Id> {                 \
    template <class T>                        \
    KILN_HD auto operator()(T a, T b) const { \
      return expr;                            \
    }                                         \
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
struct BinaryFn<OpId::Pow> {
  template <class T>
  KILN_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return ipow(a, b);
    else {
      using pm::pow;
      return pow(a, b);
    }
  }
};
template <>
struct BinaryFn<OpId::Maximum> {
  template <class T>
  KILN_HD T operator()(T a, T b) const {
    if constexpr (std::is_arithmetic_v<T>)
      return pm::max(a, b);
    else
      return select(a != a, a, select(b != b, b, max(a, b)));  // xsimd, NaN-propagating
  }
};
template <>
struct BinaryFn<OpId::Minimum> {
  template <class T>
  KILN_HD T operator()(T a, T b) const {
    if constexpr (std::is_arithmetic_v<T>)
      return pm::min(a, b);
    else
      return select(a != a, a, select(b != b, b, min(a, b)));
  }
};

// clang-format off
// Calls f(std::integral_constant<OpId, Op>{}) for a unary op id known only at run time.
template <class F> void visit_unary_op(OpId op, F&& f) {
  switch (op) {
#define KILN_CASE(Id) case OpId::Id: f(std::integral_constant<OpId, OpId::Id>{}); return;
    KILN_CASE(Neg) KILN_CASE(Abs) KILN_CASE(Exp) KILN_CASE(Log) KILN_CASE(Sqrt)
    KILN_CASE(Rsqrt) KILN_CASE(Sin) KILN_CASE(Cos) KILN_CASE(Tanh) KILN_CASE(Sigmoid)
    KILN_CASE(Relu) KILN_CASE(Silu) KILN_CASE(Reciprocal) KILN_CASE(Erf)
#undef KILN_CASE
    default: return;
  }
}
template <class F> void visit_binary_op(OpId op, F&& f) {
  switch (op) {
#define KILN_CASE(Id) case OpId::Id: f(std::integral_constant<OpId, OpId::Id>{}); return;
    KILN_CASE(Add) KILN_CASE(Sub) KILN_CASE(Mul) KILN_CASE(Div) KILN_CASE(Pow)
    KILN_CASE(Maximum) KILN_CASE(Minimum) KILN_CASE(Eq) KILN_CASE(Ne) KILN_CASE(Lt)
    KILN_CASE(Le) KILN_CASE(Gt) KILN_CASE(Ge)
#undef KILN_CASE
    default: return;
  }
}

// clang-format on

}  // namespace kiln::pm
