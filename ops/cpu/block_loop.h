// Block-buffered pointwise evaluation: the engine under every CPU pointwise family.
//
// A kernel supplies one BlockFn that computes n elements from contiguous input arrays
// into a contiguous output array, each in a "buffer dtype" the kernel chooses (float32
// for float16 data, ...). run_blocked() walks out's shape (inputs broadcast to it, any
// strides, any dtypes), and for each run of at most kBlockElements elements passes each
// operand directly when it already is contiguous in its buffer dtype, or else converts
// it into a stack buffer first (and the result back out of one). Inputs with one
// element, and Scalar operands, are converted once into a constant block.
//
// So a kernel is written once per buffer dtype, contiguous float32/float64 data goes
// straight to the vector code, and strided or mixed-dtype data still gets vector math.
// The common contiguous case makes one call per thread chunk; nothing is heap-allocated
// unless the work is split across threads.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/scalar.h"
#include "runtime/tensor.h"

namespace kiln::cpu {

constexpr int64_t kBlockElements = 512;
constexpr int kMaxBlockInputs = 3;

// The dtype kernels compute in for data of dtype d: float16/bfloat16 in float32, bool in
// int32 (arithmetic on bools), everything else as itself.
constexpr DType kernel_dtype(DType d) {
  return d == DType::Float16 || d == DType::BFloat16 ? DType::Float32
         : d == DType::Bool                          ? DType::Int32
                                                     : d;
}

// in[k] holds n elements of input k's buffer dtype, out room for n of the output's.
using BlockFn = void (*)(const void* const* in, void* out, int64_t n, const void* ctx);

struct BlockInput {
  const Tensor* tensor = nullptr;  // null: the constant in value
  DType dtype = DType::Float32;    // the buffer dtype the BlockFn reads
  alignas(8) unsigned char value[8] = {};

  static BlockInput of(const Tensor& t, DType buffer_dtype) {
    BlockInput in;
    in.tensor = &t;
    in.dtype = buffer_dtype;
    return in;
  }
  // s converted to buffer_dtype with Scalar::as (full double precision for float64).
  static BlockInput constant(const Scalar& s, DType buffer_dtype) {
    BlockInput in;
    in.dtype = buffer_dtype;
    visit_dtype(buffer_dtype, [&](auto zero) {
      const auto v = s.as<decltype(zero)>();
      std::memcpy(in.value, &v, sizeof(v));
    });
    return in;
  }
};

// Computes out (any strides) from inputs broadcast to out's shape; fn's output is in
// out_buffer_dtype and is converted to out's dtype when they differ.
void run_blocked(const Tensor& out, DType out_buffer_dtype, const BlockInput* inputs,
                 int num_inputs, BlockFn fn, const void* ctx);

}  // namespace kiln::cpu
