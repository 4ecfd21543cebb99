// clamp(x, min?, max?): min(max(x, lo), hi) in compute_t<out's element type>, with the
// NaN-propagating max/min of ops/pointwise_math.h (a NaN input or bound gives NaN).
// Scalars: [min][max], present per attrs.has_min / attrs.has_max.
#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"
#include "ops/pointwise_math.h"

namespace kiln::cuda_impl {
namespace {

template <class C>
struct ClampOp {
  C lo, hi;
  bool has_lo, has_hi;
  __device__ C operator()(C x) const {
    if (has_lo) x = pm::max(x, lo);
    if (has_hi) x = pm::min(x, hi);
    return x;
  }
};

template <class T>
void run(const OpCall& call, const Tensor& out) {
  using C = compute_t<T>;
  ClampOp<C> f{C(0), C(0), call.attrs.has_min, call.attrs.has_max};
  size_t next = 0;
  if (f.has_lo) f.lo = call.scalars[next++].as<C>();
  if (f.has_hi) f.hi = call.scalars[next++].as<C>();
  const Tensor& x = call.inputs[0];
  launch_pointwise<T, T, 1>(out, {&x}, f, call.name());
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void clamp(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>)
      throw DTypeError("[clamp] the CUDA kernel does not support dtype bool");
    else
      run<T>(call, out);
  });
}

}  // namespace kiln::cuda
