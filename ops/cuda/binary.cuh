// Pointwise binary ops, shared by ops/cuda/binary_{arith,compare}.cu (split in two
// translation units to halve the build's critical path).
//
// Semantics: 2 tensor inputs (broadcast), or 1 tensor + scalars[0] with
// attrs.scalar_first meaning the scalar is the left operand. The computation dtype D is
// result_type(a, b) / result_type(a, scalar) (ops/api.h), to_floating(D) for div; values
// are converted to compute_t<D> (16-bit floats compute in float) and the result stored in
// out's dtype (D, or bool for comparisons). The math is ops/pointwise_math.h's BinaryFn.
#pragma once

#include "ops/api.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"
#include "ops/pointwise_math.h"

namespace kiln::cuda_impl {

template <OpId Op>
struct BinaryOp {
  template <class C>
  __device__ auto operator()(C a, C b) const {
    return pm::BinaryFn<Op>{}(a, b);
  }
};

template <OpId Op, class C>
struct BinaryScalarOp {
  C scalar;
  bool scalar_first;
  __device__ auto operator()(C x) const {
    return scalar_first ? pm::BinaryFn<Op>{}(scalar, x) : pm::BinaryFn<Op>{}(x, scalar);
  }
};

constexpr bool is_comparison(OpId op) {
  return op == OpId::Eq || op == OpId::Ne || op == OpId::Lt || op == OpId::Le || op == OpId::Gt ||
         op == OpId::Ge;
}

// Whether (op, compute type) is a valid pair (the shape rules refuse the others).
template <OpId Op, class C>
constexpr bool binary_supported() {
  if constexpr (std::is_same_v<C, bool>)
    return Op != OpId::Sub && Op != OpId::Pow && Op != OpId::Div;
  else if constexpr (std::is_integral_v<C>)
    return Op != OpId::Div;
  else
    return true;
}

inline DType binary_compute_dtype(const OpCall& call) {
  DType d = call.inputs.size() == 2 ? result_type(call.inputs[0], call.inputs[1])
                                    : result_type(call.inputs[0], call.scalars[0]);
  return call.op == OpId::Div ? to_floating(d) : d;
}

// T: storage type of the computation dtype.
template <OpId Op, class T>
void binary_typed(const OpCall& call, const Tensor& out) {
  using C = compute_t<T>;
  using Out = std::conditional_t<is_comparison(Op), bool, T>;
  const char* op = call.name();
  if constexpr (binary_supported<Op, C>()) {
    if (call.inputs.size() == 2) {
      const Tensor &a = call.inputs[0], &b = call.inputs[1];
      launch_pointwise<Out, T, 2>(out, {&a, &b}, BinaryOp<Op>{}, op);
    } else {
      const Tensor& x = call.inputs[0];
      BinaryScalarOp<Op, C> f{call.scalars[0].as<C>(), call.attrs.scalar_first};
      launch_pointwise<Out, T, 1>(out, {&x}, f, op);
    }
  } else {
    throw DTypeError(detail::cat("[", op, "] the CUDA kernel does not support computing in ",
                                 dtype_name(dtype_of<T>())));
  }
}

template <OpId Op>
void binary_op(const OpCall& call, const Tensor& out) {
  visit_dtype(binary_compute_dtype(call),
              [&](auto tag) { binary_typed<Op, decltype(tag)>(call, out); });
}

void binary_arith(const OpCall& call, const Tensor& out);    // add ... minimum
void binary_compare(const OpCall& call, const Tensor& out);  // eq ... ge

}  // namespace kiln::cuda_impl
