// The 7 x 7 table of typed conversion loops behind converter() (see convert.h).
#include "ops/cpu/convert.h"

#include <array>
#include <cstring>
#include <utility>

namespace kiln::cpu {
namespace {

// Branch-free 16-bit float <-> float32 on raw bits, bit-identical to Half / BFloat16's
// own conversions (round to nearest even, subnormals, inf; NaN becomes a quiet NaN
// keeping its sign) but written so that contiguous loops vectorize (GCC does not
// vectorize loads of the Half / BFloat16 structs themselves, nor, under
// -ftrapping-math, a select between a floating-point result and another value, hence
// the bit-mask selects). Checked against the
// runtime/dtype.h conversions for every input bit pattern.
inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent, mantissa
  const uint32_t exponent = shifted & 0x0f800000u;
  uint32_t normal = shifted + ((127u - 15u) << 23);
  normal += exponent == 0x0f800000u ? (128u - 16u) << 23 : 0u;  // inf / NaN
  // Subnormal: let the FPU normalize m * 2^-24 (exact).
  const float subnormal = bits_to_float(shifted + (113u << 23)) - bits_to_float(113u << 23);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exponent == 0);  // all ones or 0
  return bits_to_float((float_to_bits(subnormal) & is_subnormal) | (normal & ~is_subnormal) | sign);
}

inline uint16_t float_to_half_bits(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t x = bits ^ sign;
  // Below 2^-14 the result is subnormal: adding 0.5 aligns the mantissa so that the
  // FPU's round-to-nearest-even does the rounding.
  const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t subnormal =
      float_to_bits(bits_to_float(x) + bits_to_float(denorm_magic)) - denorm_magic;
  const uint32_t mantissa_odd = (x >> 13) & 1u;
  const uint32_t normal =
      (x + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mantissa_odd) >> 13;
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(x < (113u << 23));  // all ones or 0
  uint32_t h = (subnormal & is_subnormal) | (normal & ~is_subnormal);
  const uint32_t special = x > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN : overflow to inf
  const uint32_t is_special = 0u - static_cast<uint32_t>(x >= ((127u + 16u) << 23));
  h = (special & is_special) | (h & ~is_special);
  return static_cast<uint16_t>(h | (sign >> 16));
}

inline float bfloat_bits_to_float(uint16_t b) {
  return bits_to_float(static_cast<uint32_t>(b) << 16);
}
inline uint16_t float_to_bfloat_bits(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Contiguous 16-bit float <-> float32 runs; false for other dtype pairs.
template <class From, class To>
bool convert_16bit_contiguous(const char* src, char* dst, int64_t n) {
  constexpr bool kFromHalf = std::is_same_v<From, Half>, kToHalf = std::is_same_v<To, Half>;
  constexpr bool kFromBf = std::is_same_v<From, BFloat16>, kToBf = std::is_same_v<To, BFloat16>;
  if constexpr ((kFromHalf || kFromBf) && std::is_same_v<To, float>) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    float* d = reinterpret_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i)
      d[i] = kFromHalf ? half_bits_to_float(s[i]) : bfloat_bits_to_float(s[i]);
    return true;
  } else if constexpr (std::is_same_v<From, float> && (kToHalf || kToBf)) {
    const float* s = reinterpret_cast<const float*>(src);
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i)
      d[i] = kToHalf ? float_to_half_bits(s[i]) : float_to_bfloat_bits(s[i]);
    return true;
  } else {
    return false;
  }
}

template <class From, class To>
void convert_run(const char* src, int64_t src_stride, char* dst, int64_t dst_stride, int64_t n) {
  if (src_stride == sizeof(From) && dst_stride == sizeof(To)) {
    if constexpr (std::is_same_v<From, To>) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(To));
    } else if (convert_16bit_contiguous<From, To>(src, dst, n)) {
      return;
    } else {
      const From* s = reinterpret_cast<const From*>(src);
      To* d = reinterpret_cast<To*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = convert_value<To>(s[i]);
    }
    return;
  }
  if (src_stride == 0) {  // one value repeated
    From v;
    std::memcpy(&v, src, sizeof(From));
    const To c = convert_value<To>(v);
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_stride, &c, sizeof(To));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * src_stride, sizeof(From));
    const To c = convert_value<To>(v);
    std::memcpy(dst + i * dst_stride, &c, sizeof(To));
  }
}

template <int D>
using ElementType = typename CppType<static_cast<DType>(D)>::type;

template <int From, size_t... To>
constexpr std::array<ConvertFn, kNumDTypes> converter_row(std::index_sequence<To...>) {
  return {&convert_run<ElementType<From>, ElementType<static_cast<int>(To)>>...};
}
template <size_t... From>
constexpr std::array<std::array<ConvertFn, kNumDTypes>, kNumDTypes> converter_table(
    std::index_sequence<From...>) {
  return {converter_row<static_cast<int>(From)>(std::make_index_sequence<kNumDTypes>{})...};
}

// Constant-initialized: usable from any static initializer.
constexpr auto kConverters = converter_table(std::make_index_sequence<kNumDTypes>{});

}  // namespace

ConvertFn converter(DType from, DType to) {
  return kConverters[static_cast<int>(from)][static_cast<int>(to)];
}

}  // namespace kiln::cpu
