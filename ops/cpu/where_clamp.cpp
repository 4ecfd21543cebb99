// CPU kernels of the Where and Clamp families (ops.def).
//
// where(cond, a, b): cond is read as bool (nonzero is true), a and b are converted to
// out's dtype and broadcast to out's shape; either of a, b may come as call.scalars[0]
// instead of a tensor (attrs.scalar_first: the scalar is a). The select itself moves
// raw elements, so it is written once per element size.
//
// clamp(x, min, max): scalars hold [min][max] per attrs.has_min / has_max; the result is
// min(max(x, lo), hi) computed in compute_t<out dtype>, and a NaN input stays NaN.
#include <limits>

#include "ops/cpu/block_loop.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"
#include "runtime/error.h"

namespace kiln::cpu {
namespace {

// ---- where

template <class U>
void where_block(const void* const* in, void* out, int64_t n, const void*) {
  const bool* cond = static_cast<const bool*>(in[0]);
  const U* a = static_cast<const U*>(in[1]);
  const U* b = static_cast<const U*>(in[2]);
  U* o = static_cast<U*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = cond[i] ? a[i] : b[i];
}

BlockFn where_fn(int64_t element_size) {
  switch (element_size) {
    case 1:
      return &where_block<uint8_t>;
    case 2:
      return &where_block<uint16_t>;
    case 4:
      return &where_block<uint32_t>;
    default:
      return &where_block<uint64_t>;
  }
}

// ---- clamp

template <class T>
struct ClampBounds {
  T lo, hi;
  typename simd::KernelTable<T>::Clamp vector_fn = nullptr;  // floating types only
};

template <class T>
ClampBounds<T> clamp_bounds(const OpCall& call) {
  ClampBounds<T> b;
  if constexpr (std::is_floating_point_v<T>) {
    b.lo = -std::numeric_limits<T>::infinity();
    b.hi = std::numeric_limits<T>::infinity();
    b.vector_fn = simd::table<T>().clamp;
  } else {
    b.lo = std::numeric_limits<T>::lowest();
    b.hi = std::numeric_limits<T>::max();
  }
  int next = 0;
  if (call.attrs.has_min) b.lo = call.scalars[next++].template as<T>();
  if (call.attrs.has_max) b.hi = call.scalars[next].template as<T>();
  return b;
}

template <class T>
void vector_clamp_block(const void* const* in, void* out, int64_t n, const void* ctx) {
  const auto& b = *static_cast<const ClampBounds<T>*>(ctx);
  b.vector_fn(static_cast<const T*>(in[0]), static_cast<T*>(out), n, b.lo, b.hi);
}

template <class T>
void integer_clamp_block(const void* const* in, void* out, int64_t n, const void* ctx) {
  const auto& b = *static_cast<const ClampBounds<T>*>(ctx);
  const T* x = static_cast<const T*>(in[0]);
  T* o = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i] < b.lo ? b.lo : x[i];
    o[i] = v > b.hi ? b.hi : v;
  }
}

template <class T>
void run_clamp(const OpCall& call, const Tensor& out, DType compute) {
  const ClampBounds<T> bounds = clamp_bounds<T>(call);
  BlockFn fn;
  if constexpr (std::is_floating_point_v<T>) {
    fn = &vector_clamp_block<T>;
  } else {
    fn = &integer_clamp_block<T>;
  }
  BlockInput in = BlockInput::of(call.inputs[0], compute);
  run_blocked(out, compute, &in, 1, fn, &bounds);
}

}  // namespace

void where(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const DType dtype = out.dtype();
  BlockInput inputs[3];
  inputs[0] = BlockInput::of(call.inputs[0], DType::Bool);
  if (call.inputs.size() == 3) {
    inputs[1] = BlockInput::of(call.inputs[1], dtype);
    inputs[2] = BlockInput::of(call.inputs[2], dtype);
  } else {
    KILN_CHECK(call.inputs.size() == 2 && !call.scalars.empty(), Error,
               "[where] expected 3 tensors, or 2 and a scalar");
    const int tensor_slot = call.attrs.scalar_first ? 2 : 1;
    inputs[tensor_slot] = BlockInput::of(call.inputs[1], dtype);
    inputs[3 - tensor_slot] = BlockInput::constant(call.scalars[0], dtype);
  }
  run_blocked(out, dtype, inputs, 3, where_fn(itemsize(dtype)), nullptr);
}

void clamp(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const DType compute = kernel_dtype(out.dtype());
  switch (compute) {
    case DType::Float32:
      run_clamp<float>(call, out, compute);
      return;
    case DType::Float64:
      run_clamp<double>(call, out, compute);
      return;
    case DType::Int32:
      run_clamp<int32_t>(call, out, compute);
      return;
    case DType::Int64:
      run_clamp<int64_t>(call, out, compute);
      return;
    default:
      KILN_CHECK(false, Error, "[clamp] no CPU kernel for ", dtype_name(compute));
  }
}

}  // namespace kiln::cpu
