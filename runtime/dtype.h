// DType: the element types kiln supports, their sizes and names, the 16-bit float
// storage types, and PyTorch's type-promotion rules (bool < integer < floating).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/macros.h"

namespace kiln {

// Order matters: promote_types() relies on category then width.
enum class DType : uint8_t { Bool, Int32, Int64, Float16, BFloat16, Float32, Float64 };
constexpr int kNumDTypes = 7;

// IEEE binary16 stored as bits; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  KILN_HD Half(float f) : bits(from_float(f)) {}
  KILN_HD operator float() const { return to_float(bits); }

  static KILN_HD uint16_t from_float(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
    int32_t e = static_cast<int32_t>(exp) - 127 + 15;
    if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (e <= 0) {                                               // subnormal or zero
      if (e < -10) return static_cast<uint16_t>(sign);
      mant |= 0x800000u;
      uint32_t shift = static_cast<uint32_t>(14 - e);
      uint32_t half_mant = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1u);
      uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
      return static_cast<uint16_t>(sign | half_mant);
    }
    uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // round to nearest even
    return static_cast<uint16_t>(h);
  }
  static KILN_HD float to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
      if (mant == 0) {
        x = sign;
      } else {  // normalize the subnormal
        int e = -1;
        do {
          ++e;
          mant <<= 1;
        } while ((mant & 0x400u) == 0);
        x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
      }
    } else if (exp == 31) {
      x = sign | 0x7f800000u | (mant << 13);
    } else {
      x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
  }
};

// bfloat16: the top 16 bits of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  KILN_HD BFloat16(float f) : bits(from_float(f)) {}
  KILN_HD operator float() const { return to_float(bits); }

  static KILN_HD uint16_t from_float(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
  }
  static KILN_HD float to_float(uint16_t b) {
    uint32_t x = static_cast<uint32_t>(b) << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
  }
};

// C++ element type for each DType.
template <DType D>
struct CppType;
template <>
struct CppType<DType::Bool> {
  using type = bool;
};
template <>
struct CppType<DType::Int32> {
  using type = int32_t;
};
template <>
struct CppType<DType::Int64> {
  using type = int64_t;
};
template <>
struct CppType<DType::Float16> {
  using type = Half;
};
template <>
struct CppType<DType::BFloat16> {
  using type = BFloat16;
};
template <>
struct CppType<DType::Float32> {
  using type = float;
};
template <>
struct CppType<DType::Float64> {
  using type = double;
};

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::Int32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::Float16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::BFloat16;
}
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Float64;
}

// The arithmetic type a kernel computes in for an element type (16-bit floats in float).
template <class T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Half> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <class T>
using compute_t = typename ComputeType<T>::type;

constexpr int64_t itemsize(DType d) {
  switch (d) {
    case DType::Bool:
      return 1;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Float16:
      return 2;
    case DType::BFloat16:
      return 2;
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
  }
  return 0;
}
constexpr bool is_floating(DType d) { return d >= DType::Float16; }
constexpr bool is_integral(DType d, bool include_bool = false) {
  return d == DType::Int32 || d == DType::Int64 || (include_bool && d == DType::Bool);
}

const char* dtype_name(DType d);  // "float32", ...
std::string to_string(DType d);

// PyTorch's promote_types: the smallest type both values fit in, by category.
DType promote_types(DType a, DType b);
// The default floating type (what int tensors become under exp, mean, ...).
constexpr DType kDefaultFloat = DType::Float32;
// Float result for ops that need one (exp on int32 -> float32).
inline DType to_floating(DType d) { return is_floating(d) ? d : kDefaultFloat; }

// Calls f(T{}) with T the C++ element type of d.
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::Bool:
      return f(bool{});
    case DType::Int32:
      return f(int32_t{});
    case DType::Int64:
      return f(int64_t{});
    case DType::Float16:
      return f(Half{});
    case DType::BFloat16:
      return f(BFloat16{});
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
  }
  return f(float{});
}

}  // namespace kiln
