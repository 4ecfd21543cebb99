// Arithmetic binary ops: add, sub, mul, div, pow, maximum, minimum (ops/cuda/binary.cuh).
#include "ops/cuda/binary.cuh"

namespace kiln::cuda_impl {

void binary_arith(const OpCall& call, const Tensor& out) {
  switch (call.op) {
    case OpId::Add:
      binary_op<OpId::Add>(call, out);
      return;
    case OpId::Sub:
      binary_op<OpId::Sub>(call, out);
      return;
    case OpId::Mul:
      binary_op<OpId::Mul>(call, out);
      return;
    case OpId::Div:
      binary_op<OpId::Div>(call, out);
      return;
    case OpId::Pow:
      binary_op<OpId::Pow>(call, out);
      return;
    case OpId::Maximum:
      binary_op<OpId::Maximum>(call, out);
      return;
    case OpId::Minimum:
      binary_op<OpId::Minimum>(call, out);
      return;
    default:
      break;
  }
  throw Error(detail::cat("[", call.name(), "] internal: not an arithmetic binary op"));
}

}  // namespace kiln::cuda_impl
