// Pointwise unary ops (neg ... reciprocal, gelu) and Cast. Each op computes in
// compute_t<out's element type> after converting the input element (int32 -> float for
// exp), with the shared math of ops/pointwise_math.h. Cast is a converting copy
// (ops/cuda/cast.cu).
#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"
#include "ops/pointwise_math.h"

namespace kiln::cuda_impl {
namespace {

template <OpId Op>
struct UnaryOp {
  template <class C>
  __device__ C operator()(C x) const {
    return pm::UnaryFn<Op>{}(x);
  }
};

struct GeluOp {
  bool approximate_tanh;
  template <class C>
  __device__ C operator()(C x) const {
    return approximate_tanh ? pm::GeluTanh{}(x) : pm::GeluErf{}(x);
  }
};

constexpr bool integer_ok(OpId op) {
  return op == OpId::Neg || op == OpId::Abs || op == OpId::Relu;
}

template <class T, class F>
void run(const Tensor& x, const Tensor& out, const F& f, const char* op) {
  launch_pointwise<T, T, 1>(out, {&x}, f, op);
}

template <class T>
void run_op(const OpCall& call, const Tensor& out) {
  const Tensor& x = call.inputs[0];
  const char* op = call.name();
  if (call.op == OpId::Gelu) {
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      run<T>(x, out, GeluOp{call.attrs.approximate_tanh}, op);
      return;
    }
  } else {
    bool handled = false;
    pm::visit_unary_op(call.op, [&](auto op_tag) {
      constexpr OpId kOp = decltype(op_tag)::value;
      if constexpr (std::is_floating_point_v<compute_t<T>> || integer_ok(kOp)) {
        run<T>(x, out, UnaryOp<kOp>{}, op);
        handled = true;
      }
    });
    if (handled) return;
  }
  throw DTypeError(detail::cat("[", op, "] the CUDA kernel does not support output dtype ",
                               dtype_name(out.dtype())));
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void unary(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  if (call.op == OpId::Cast) {
    copy_convert(call.inputs[0], out, call.name());
    return;
  }
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>)
      throw DTypeError(
          detail::cat("[", call.name(), "] the CUDA kernel does not support dtype bool"));
    else
      run_op<T>(call, out);
  });
}

}  // namespace kiln::cuda
