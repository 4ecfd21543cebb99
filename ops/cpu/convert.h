// Element conversion between any two dtypes, for strided runs of elements. This is the
// one place that defines what a dtype conversion means on the CPU (Cast, copy_, and the
// operand loads of every pointwise kernel go through it):
//   - to bool: nonzero (NaN included) is true;
//   - from bool: 0 or 1;
//   - floating to integer truncates toward zero (out-of-range values are unspecified);
//   - float16/bfloat16 convert through float, rounding to nearest even.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/dtype.h"

namespace kiln::cpu {

// Converts n elements: dst[i * dst_stride] = convert(src[i * src_stride]); strides in
// bytes, 0 allowed for src (repeats one value). dtype-identical conversion is a copy.
using ConvertFn = void (*)(const char* src, int64_t src_stride, char* dst, int64_t dst_stride,
                           int64_t n);

ConvertFn converter(DType from, DType to);

// One value: To from From, with the rules above.
template <class To, class From>
inline To convert_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return convert_value<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Converts one element of dtype `from` at src into dtype `to` at dst.
inline void convert_one(DType from, const void* src, DType to, void* dst) {
  converter(from, to)(static_cast<const char*>(src), 0, static_cast<char*>(dst), 0, 1);
}

}  // namespace kiln::cpu
