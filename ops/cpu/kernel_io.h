// How the non-pointwise CPU kernels (reduce, softmax, layer_norm, matmul, linear,
// conv2d, pool2d, cat, index_select) read inputs and write outputs:
//  - element conversions between storage types and compute types (16-bit floats go
//    through float, bool stores v != 0);
//  - copy_converted: a strided, converting copy made by the Cast kernel directly
//    (nothing is recorded by the tracer);
//  - with_output: lets a kernel write a contiguous buffer of the dtype it naturally
//    produces, staging through a temporary when out has another dtype or strides;
//  - split_at_dim: views a contiguous shape as [outer, size(dim), inner].
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/kernels.h"

namespace kiln::cpu {

// Converts a computed value v to the storage type Out.
template <class Out, class V>
inline Out to_element(V v) {
  if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>) {
    return Out(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Out, bool>) {
    return static_cast<double>(v) != 0.0;
  } else {
    return static_cast<Out>(v);
  }
}

template <class V>
inline bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) {
    return v != v;
  } else {
    return false;
  }
}

// dst = src converted to dst's dtype; same shape; any strides on both sides.
inline void copy_converted(const Tensor& src, const Tensor& dst) {
  OpCall call;
  call.op = OpId::Cast;
  call.inputs.push_back(src);
  call.attrs.dtype = dst.dtype();
  unary(call, dst);
}

// Calls body(buffer) with a contiguous tensor of dtype shaped like out: out itself when
// it already is one, otherwise a temporary that is then copied (converted) into out.
template <class Body>
void with_output(const Tensor& out, DType dtype, Body&& body) {
  if (out.dtype() == dtype && out.is_contiguous()) {
    body(out);
    return;
  }
  Tensor staging = Tensor::make(out.sizes(), dtype, out.device());
  body(staging);
  copy_converted(staging, out);
}

// The dtype that floating kernels compute in for a result of dtype d.
inline DType compute_dtype(DType d) {
  return d == DType::Float64 ? DType::Float64 : DType::Float32;
}

// A contiguous shape seen as [outer, size, inner] around one dim.
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline DimSplit split_at_dim(const Dims& sizes, int64_t dim) {
  DimSplit split;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  for (int64_t d = 0; d < rank; ++d) {
    if (d < dim)
      split.outer *= sizes[d];
    else if (d == dim)
      split.size = sizes[d];
    else
      split.inner *= sizes[d];
  }
  return split;
}

}  // namespace kiln::cpu
