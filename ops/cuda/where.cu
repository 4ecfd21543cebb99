// where(cond, a, b): cond (bool), a and b broadcast to out's shape; out's dtype is the
// promoted dtype of a and b. Values are converted to compute_t<out's element type>.
#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"

namespace kiln::cuda_impl {
namespace {

struct WhereOp {
  template <class C>
  __device__ C operator()(C cond, C a, C b) const {
    return cond != C(0) ? a : b;
  }
};

template <class T>
void run(const OpCall& call, const Tensor& out) {
  const Tensor &cond = call.inputs[0], &a = call.inputs[1], &b = call.inputs[2];
  launch_strided<compute_t<T>, 3>(out, {&cond, &a, &b}, WhereOp{}, call.name());
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void where(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  visit_dtype(out.dtype(), [&](auto tag) { run<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
