// CPU kernels of the Binary family (ops.def): add ... minimum and the comparisons.
//
// Operands: two tensors, or one tensor and call.scalars[0] (on the left when
// attrs.scalar_first). Both are converted to the computation dtype, result_type() of
// the operands (floating for div), and broadcast to out's shape. float32/float64 (and
// 16-bit floats, computed in float32) use the vector tables of ops/cpu/simd.h; integers
// and bools (computed in int32) the scalar pm:: functors. Comparisons write bool.
#include "ops/api.h"
#include "ops/cpu/block_loop.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"
#include "ops/pointwise_math.h"
#include "runtime/error.h"

namespace kiln::cpu {
namespace {

bool is_comparison(OpId op) {
  return op == OpId::Eq || op == OpId::Ne || op == OpId::Lt || op == OpId::Le || op == OpId::Gt ||
         op == OpId::Ge;
}

DType binary_compute_dtype(const OpCall& call) {
  const DType promoted = call.inputs.size() == 2 ? result_type(call.inputs[0], call.inputs[1])
                                                 : result_type(call.inputs[0], call.scalars[0]);
  return call.op == OpId::Div ? to_floating(promoted) : promoted;
}

// ctx: the vector kernel to run.
template <class T>
void vector_binary_block(const void* const* in, void* out, int64_t n, const void* ctx) {
  const auto fn = *static_cast<const typename simd::KernelTable<T>::Binary*>(ctx);
  fn(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<T*>(out), n);
}
template <class T>
void vector_compare_block(const void* const* in, void* out, int64_t n, const void* ctx) {
  const auto fn = *static_cast<const typename simd::KernelTable<T>::Compare*>(ctx);
  fn(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<bool*>(out), n);
}

template <class T, OpId Op>
void integer_binary_block(const void* const* in, void* out, int64_t n, const void*) {
  using R =
      std::conditional_t<std::is_same_v<decltype(pm::BinaryFn<Op>{}(T{}, T{})), bool>, bool, T>;
  const T* a = static_cast<const T*>(in[0]);
  const T* b = static_cast<const T*>(in[1]);
  R* o = static_cast<R*>(out);
  const pm::BinaryFn<Op> f;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(a[i], b[i]));
}

// Integer division never runs here: div computes in a floating dtype.
template <class T>
BlockFn integer_binary_fn(OpId op) {
  BlockFn fn = nullptr;
  pm::visit_binary_op(op, [&](auto tag) {
    constexpr OpId kOp = decltype(tag)::value;
    if constexpr (kOp != OpId::Div) fn = &integer_binary_block<T, kOp>;
  });
  return fn;
}

void run(const OpCall& call, const Tensor& out, DType compute, BlockFn fn, const void* ctx) {
  KILN_CHECK(fn != nullptr, Error, "[", call.name(), "] no CPU kernel for ", dtype_name(compute));
  const DType out_buffer = is_comparison(call.op) ? DType::Bool : compute;
  BlockInput inputs[2];
  if (call.inputs.size() == 2) {
    inputs[0] = BlockInput::of(call.inputs[0], compute);
    inputs[1] = BlockInput::of(call.inputs[1], compute);
  } else {
    const int tensor_slot = call.attrs.scalar_first ? 1 : 0;
    inputs[tensor_slot] = BlockInput::of(call.inputs[0], compute);
    inputs[1 - tensor_slot] = BlockInput::constant(call.scalars[0], compute);
  }
  run_blocked(out, out_buffer, inputs, 2, fn, ctx);
}

template <class T>
void run_vector(const OpCall& call, const Tensor& out, DType compute) {
  const simd::KernelTable<T>& table = simd::table<T>();
  const int op = static_cast<int>(call.op);
  if (is_comparison(call.op)) {
    const typename simd::KernelTable<T>::Compare fn = table.compare[op];
    run(call, out, compute, fn ? &vector_compare_block<T> : nullptr, &fn);
  } else {
    const typename simd::KernelTable<T>::Binary fn = table.binary[op];
    run(call, out, compute, fn ? &vector_binary_block<T> : nullptr, &fn);
  }
}

}  // namespace

void binary(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const DType compute = kernel_dtype(binary_compute_dtype(call));
  switch (compute) {
    case DType::Float32:
      run_vector<float>(call, out, compute);
      return;
    case DType::Float64:
      run_vector<double>(call, out, compute);
      return;
    case DType::Int32:
      run(call, out, compute, integer_binary_fn<int32_t>(call.op), nullptr);
      return;
    case DType::Int64:
      run(call, out, compute, integer_binary_fn<int64_t>(call.op), nullptr);
      return;
    default:
      run(call, out, compute, nullptr, nullptr);
  }
}

}  // namespace kiln::cpu
