// CPU kernels of the Factory family (ops.def): empty (nothing to do unless
// fill_uninitialized()), full, arange.
//
// full writes scalars[0] converted to out's dtype (Scalar::as) into every element of
// out, which may be a strided view (fill_ and zero_ land here). arange writes
// out[i] = start + i * step (scalars: start, end, step) in int64 arithmetic for integer
// outputs with integer start and step, in double otherwise, then converts to out's dtype.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/convert.h"
#include "ops/cpu/kernel_io.h"
#include "ops/cpu/loops.h"
#include "ops/kernels.h"
#include "runtime/error.h"

namespace kiln::cpu {
namespace {

template <class U>
void fill_run(char* dst, int64_t stride, U value, int64_t n) {
  if (stride == sizeof(U)) {
    U* p = reinterpret_cast<U*>(dst);
    for (int64_t i = 0; i < n; ++i) p[i] = value;
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * stride, &value, sizeof(U));
}

template <class U>
void fill_typed(const Tensor& out, const void* value_bytes) {
  U value;
  std::memcpy(&value, value_bytes, sizeof(U));
  const LoopOperand operand = LoopOperand::of(out);
  const StridedLoop loop = make_loop(out, &operand, 1);
  parallel_loop(loop, kPointwiseGrain, [&](int64_t begin, int64_t end) {
    auto inner = [value](char* const* ptrs, const int64_t* strides, int64_t n) {
      fill_run<U>(ptrs[0], strides[0], value, n);
    };
    run_range(loop, begin, end, inner);
  });
}

void full(const Tensor& out, const Scalar& value) {
  if (out.numel() == 0) return;
  alignas(8) unsigned char bytes[8];
  visit_dtype(out.dtype(), [&](auto zero) {
    const auto v = value.as<decltype(zero)>();
    std::memcpy(bytes, &v, sizeof(v));
  });
  switch (out.element_size()) {
    case 1:
      fill_typed<uint8_t>(out, bytes);
      return;
    case 2:
      fill_typed<uint16_t>(out, bytes);
      return;
    case 4:
      fill_typed<uint32_t>(out, bytes);
      return;
    default:
      fill_typed<uint64_t>(out, bytes);
      return;
  }
}

template <class T>
void arange_typed(const Tensor& out, const OpCall& call) {
  T* data = out.data<T>();
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (call.scalars[0].is_floating() ||
        call.scalars[2].is_floating()) {  // arange(0, 5, 1.5) as int64: [0, 1, 3, 4] like PyTorch
      const double start = call.scalars[0].to_double(), step = call.scalars[2].to_double();
      parallel_for(0, out.numel(), kPointwiseGrain, [=](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          data[i] = static_cast<T>(start + static_cast<double>(i) * step);
      });
      return;
    }
    const int64_t start = call.scalars[0].to_int(), step = call.scalars[2].to_int();
    parallel_for(0, out.numel(), kPointwiseGrain, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) data[i] = static_cast<T>(start + i * step);
    });
  } else {
    const double start = call.scalars[0].to_double(), step = call.scalars[2].to_double();
    parallel_for(0, out.numel(), kPointwiseGrain, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        data[i] = convert_value<T>(start + static_cast<double>(i) * step);
    });
  }
}

void arange(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  if (!out.is_contiguous()) {  // not made by the dispatcher, but cheap to support
    with_output(out, out.dtype(), [&](const Tensor& packed) { arange(call, packed); });
    return;
  }
  visit_dtype(out.dtype(), [&](auto zero) { arange_typed<decltype(zero)>(out, call); });
}

}  // namespace

void factory(const OpCall& call, const Tensor& out) {
  switch (call.op) {
    case OpId::Empty:
      if (fill_uninitialized() && is_floating(out.dtype())) full(out, Scalar(std::nan("")));
      return;
    case OpId::Full:
      full(out, call.scalars[0]);
      return;
    case OpId::Arange:
      arange(call, out);
      return;
    default:
      KILN_CHECK(false, Error, "[", call.name(), "] is not a factory op");
  }
}

}  // namespace kiln::cpu

namespace kiln {

bool fill_uninitialized() {
  const char* v = std::getenv("KILN_FILL_UNINITIALIZED");
  return v != nullptr && v[0] == '1';
}

}  // namespace kiln
