// Comparisons: eq, ne, lt, le, gt, ge, writing bool (ops/cuda/binary.cuh).
#include "ops/cuda/binary.cuh"

namespace kiln::cuda_impl {

void binary_compare(const OpCall& call, const Tensor& out) {
  switch (call.op) {
    case OpId::Eq:
      binary_op<OpId::Eq>(call, out);
      return;
    case OpId::Ne:
      binary_op<OpId::Ne>(call, out);
      return;
    case OpId::Lt:
      binary_op<OpId::Lt>(call, out);
      return;
    case OpId::Le:
      binary_op<OpId::Le>(call, out);
      return;
    case OpId::Gt:
      binary_op<OpId::Gt>(call, out);
      return;
    case OpId::Ge:
      binary_op<OpId::Ge>(call, out);
      return;
    default:
      break;
  }
  throw Error(detail::cat("[", call.name(), "] internal: not a comparison"));
}

}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void binary(const OpCall& call, const Tensor& out) {
  if (cuda_impl::is_comparison(call.op))
    cuda_impl::binary_compare(call, out);
  else
    cuda_impl::binary_arith(call, out);
}

}  // namespace kiln::cuda
