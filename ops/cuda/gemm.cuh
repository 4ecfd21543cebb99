// Matrix products for matmul, linear and conv2d through cuBLAS (one handle per device,
// bound to kiln's stream, created on first use; calls serialized per device).
//
// Precision: float32 uses CUBLAS_COMPUTE_32F with the default math mode (TF32 off), so
// results match a float32 reference within ~1e-5 relative; float64 uses 64F; float16 and
// bfloat16 use GemmEx with float accumulation (CUBLAS_COMPUTE_32F).
//
// Layout: operands are row-major logical matrices with arbitrary (row, col) element
// strides; gemm() maps each onto cuBLAS's column-major view (op N or T with a leading
// dimension) and fails over to packing when neither fits. The result is written row-major
// with row stride ldc and unit column stride.
#pragma once

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {

struct MatrixArg {
  const void* data;
  int64_t row_stride, col_stride;  // elements
  int64_t batch_stride;            // elements; 0 broadcasts one matrix over the batch
};

struct GemmShape {
  int64_t batch, m, n, k;
};

// For b in [0, batch): C_b[m, n] (= or +=) A_b[m, k] @ B_b[k, n]. dtype is a floating
// dtype (float16, bfloat16, float32, float64); A, B and C all have it. c has row stride
// ldc, column stride 1, batch stride c_batch_stride. accumulate: C += A @ B (beta = 1).
// Returns false (doing nothing) when an operand's strides do not fit cuBLAS; the caller
// then packs that operand (see gemm_fits) and calls again.
void gemm(DType dtype, int device, const GemmShape& shape, const MatrixArg& a, const MatrixArg& b,
          void* c, int64_t ldc, int64_t c_batch_stride, bool accumulate, const char* op);

// Whether a [rows, cols] matrix with these strides maps onto cuBLAS without packing.
bool gemm_fits(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

// out[i] = bias[((i / inner) % channels) * bias_stride] for i < n (the bias broadcast
// over a [outer, channels, inner] dense output, before an accumulating gemm).
void fill_bias(const Tensor& out, const Tensor& bias, int64_t channels, int64_t inner,
               const char* op);

}  // namespace kiln::cuda_impl
