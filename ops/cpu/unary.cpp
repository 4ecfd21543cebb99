// CPU kernels of the Unary family (ops.def): neg ... reciprocal, gelu, and cast.
//
// Math ops compute in compute_t<out element type> (float32 for 16-bit floats; float32
// for a floating op writing integers), converting the input element first. float32 and
// float64 go through the vector tables (ops/cpu/simd.h) whatever the layout; neg, abs
// and relu on integers use the scalar pm:: functors. Cast converts any dtype to any
// dtype (ops/cpu/convert.h) with broadcasting; same-dtype contiguous copies are memcpy.
#include <cstring>

#include "ops/cpu/block_loop.h"
#include "ops/cpu/convert.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/tiled_copy.h"
#include "ops/kernels.h"
#include "ops/pointwise_math.h"
#include "runtime/error.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kCopyGrainBytes = 1 << 18;

bool is_integer_capable(OpId op) { return op == OpId::Neg || op == OpId::Abs || op == OpId::Relu; }

// The buffer dtype the op's math runs in for an output of dtype out.
DType unary_compute_dtype(OpId op, DType out) {
  const DType k = kernel_dtype(out);
  if (is_floating(k) || is_integer_capable(op)) return k;
  return DType::Float32;
}

// ctx: the vector kernel to run.
template <class T>
void vector_unary_block(const void* const* in, void* out, int64_t n, const void* ctx) {
  const auto fn = *static_cast<const typename simd::KernelTable<T>::Unary*>(ctx);
  fn(static_cast<const T*>(in[0]), static_cast<T*>(out), n);
}

template <class T, OpId Op>
void integer_unary_block(const void* const* in, void* out, int64_t n, const void*) {
  const T* x = static_cast<const T*>(in[0]);
  T* o = static_cast<T*>(out);
  const pm::UnaryFn<Op> f;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(x[i]));
}

template <class T>
BlockFn integer_unary_fn(OpId op) {
  switch (op) {
    case OpId::Neg:
      return &integer_unary_block<T, OpId::Neg>;
    case OpId::Abs:
      return &integer_unary_block<T, OpId::Abs>;
    case OpId::Relu:
      return &integer_unary_block<T, OpId::Relu>;
    default:
      return nullptr;
  }
}

template <class T>
void run_vector_unary(const OpCall& call, const Tensor& out, DType compute) {
  const simd::KernelTable<T>& table = simd::table<T>();
  const typename simd::KernelTable<T>::Unary fn =
      call.op == OpId::Gelu && call.attrs.approximate_tanh ? table.gelu_tanh
                                                           : table.unary[static_cast<int>(call.op)];
  KILN_CHECK(fn != nullptr, Error, "[", call.name(), "] no CPU kernel for ", dtype_name(compute));
  BlockInput in = BlockInput::of(call.inputs[0], compute);
  run_blocked(out, compute, &in, 1, &vector_unary_block<T>, &fn);
}

void cast_kernel(const Tensor& in, const Tensor& out) {
  if (out.numel() == 0) return;
  if (in.dtype() == out.dtype() && in.is_contiguous() && out.is_contiguous() &&
      in.numel() == out.numel()) {
    const char* src = static_cast<const char*>(in.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    if (src == dst) return;
    const int64_t nbytes = out.numel() * out.element_size();
    parallel_for(0, nbytes, kCopyGrainBytes, [src, dst](int64_t begin, int64_t end) {
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
    });
    return;
  }
  const LoopOperand operands[2] = {LoopOperand::of(out), LoopOperand::of(in)};
  const StridedLoop loop = make_loop(out, operands, 2);
  const ConvertFn convert = converter(in.dtype(), out.dtype());
  if (tiled_convert(loop, in.element_size(), convert)) return;
  parallel_loop(loop, kPointwiseGrain, [&](int64_t begin, int64_t end) {
    auto inner = [convert](char* const* ptrs, const int64_t* strides, int64_t n) {
      convert(ptrs[1], strides[1], ptrs[0], strides[0], n);
    };
    run_range(loop, begin, end, inner);
  });
}

}  // namespace

void unary(const OpCall& call, const Tensor& out) {
  if (call.op == OpId::Cast) {
    cast_kernel(call.inputs[0], out);
    return;
  }
  if (out.numel() == 0) return;
  const DType compute = unary_compute_dtype(call.op, out.dtype());
  switch (compute) {
    case DType::Float32:
      run_vector_unary<float>(call, out, compute);
      return;
    case DType::Float64:
      run_vector_unary<double>(call, out, compute);
      return;
    case DType::Int32:
    case DType::Int64: {
      const BlockFn fn = compute == DType::Int32 ? integer_unary_fn<int32_t>(call.op)
                                                 : integer_unary_fn<int64_t>(call.op);
      KILN_CHECK(fn != nullptr, Error, "[", call.name(), "] no CPU kernel for ",
                 dtype_name(compute));
      BlockInput in = BlockInput::of(call.inputs[0], compute);
      run_blocked(out, compute, &in, 1, fn, nullptr);
      return;
    }
    default:
      KILN_CHECK(false, Error, "[", call.name(), "] no CPU kernel for ", dtype_name(compute));
  }
}

}  // namespace kiln::cpu
