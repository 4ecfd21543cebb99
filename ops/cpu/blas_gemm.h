// Row-major GEMM on the CPU, shared by matmul, linear and conv2d: float32 through
// oneDNN's dnnl_sgemm when the library is present (ops/cpu/onednn_gemm.h; 5-34% less
// time than OpenBLAS on the model shapes, docs/cpu_matmul.md), otherwise and for
// float64 through OpenBLAS (cblas_sgemm / cblas_dgemm). Both run single-threaded.
// Operands are described by sizes and element strides, so transposed 2-D views go to
// the library as they are (through the transpose flag and the leading dimension)
// instead of being copied. Only float32 and float64 are computed here: callers convert
// 16-bit floats to float32 first.
//
// Threads: OpenBLAS is switched to one thread at the first GEMM (oneDNN runs on one
// thread per call), and a large GEMM is split into row (or column) blocks run on kiln's
// own pool, one single-threaded GEMM call per block. Measured on 2 pinned cores of the
// GPU host's CPU (a noisy VM): GEMM speed equal to OpenBLAS's own threads at best
// (1024^3 float32: 34.5 vs 33.6 ms best-of-11; 512^3 a little faster), while with
// OpenBLAS's pool the op right after a GEMM ran 1.8x slower (a 2^22 sum: 0.92-1.13 ms
// instead of 0.5-0.6 ms), because its idle workers keep spinning for a while and take
// the cores from kiln's threads. So one pool serves every op. (The switch is
// process-wide: other users of the same libopenblas in the process get one thread too.)
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace kiln::cpu {

// A rows x cols matrix at data: element (r, c) lives at data[r * row_stride + c * col_stride].
struct GemmOperand {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 0;
};

// Whether BLAS can read the operand in place: one stride is 1 and the other covers the
// extent of that dimension (size-1 dims impose nothing).
bool gemm_can_read(const GemmOperand& m);

// C = A @ B (+ C when accumulate), where C is a row-major a.rows x b.cols matrix with
// leading dimension ldc. dtype is Float32 or Float64 for A, B and C alike; both
// operands must pass gemm_can_read. A zero inner size gives zeros (or leaves C).
// Products above kSplitGemmWork run in parallel on kiln's pool (inline when called
// from inside a parallel region).
void gemm(DType dtype, const GemmOperand& a, const GemmOperand& b, void* c, int64_t ldc,
          bool accumulate);

// Multiply-adds below which one GEMM stays on one thread (OpenBLAS's own threshold);
// callers with many such products spread them over the pool instead.
constexpr int64_t kSplitGemmWork = int64_t{1} << 18;

}  // namespace kiln::cpu
