// Factories: empty (nothing to do; NaN under fill_uninitialized()), full (scalars[0], converted
// memset when out is dense) and arange (scalars start, end, step: out[i] = start + i*step,
// in int64 when out is integral and start and step are integers, else in double, then
// converted to out's dtype).
#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/cuda/generate.cuh"

namespace kiln::cuda_impl {
namespace {

template <class T>
struct FillGen {
  T value;
  __device__ T operator()(int64_t) const { return value; }
};

template <class T>
struct ArangeIntGen {
  int64_t start, step;
  __device__ T operator()(int64_t i) const { return convert<T>(start + i * step); }
};

template <class T>
struct ArangeGen {
  double start, step;
  __device__ T operator()(int64_t i) const {
    return convert<T>(start + static_cast<double>(i) * step);
  }
};

template <class T>
void run(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  if (call.op == OpId::Full) {
    const Scalar& v = call.scalars[0];
    const bool zero =
        v.is_floating() ? v.to_double() == 0.0 && !std::signbit(v.to_double()) : v.to_int() == 0;
    if (zero && out.is_contiguous()) {
      const int device = out.device().index;
      DeviceScope scope(device);
      check(
          cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.numel() * out.element_size()),
                          stream_of(device)),
          op, "cudaMemsetAsync");
      return;
    }
    launch_generate<T>(out, FillGen<T>{v.as<T>()}, op);
  } else if (call.op == OpId::Arange) {
    const Scalar &start = call.scalars[0], &step = call.scalars[2];
    if (std::is_integral_v<T> && !start.is_floating() && !step.is_floating()) {
      launch_generate<T>(out, ArangeIntGen<T>{start.to_int(), step.to_int()}, op);
    } else {
      launch_generate<T>(out, ArangeGen<T>{start.to_double(), step.to_double()}, op);
    }
  }
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void factory(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  if (call.op == OpId::Empty) {
    if (!fill_uninitialized() || !is_floating(out.dtype())) return;
    OpCall nan_fill{OpId::Full, {}, {Scalar(std::nan(""))}, call.attrs};
    visit_dtype(out.dtype(), [&](auto tag) { run<decltype(tag)>(nan_fill, out); });
    return;
  }
  visit_dtype(out.dtype(), [&](auto tag) { run<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
