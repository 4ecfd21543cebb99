// oneDNN's row-major float32 GEMM (dnnl_sgemm), loaded at run time when the library is
// present (Debian's libdnnl2, or a oneDNN 3.x libdnnl.so.3 on the library path), and
// always run on one thread: kiln's own pool splits the work (ops/cpu/blas_gemm.h).
// docs/cpu_matmul.md gives the measurements behind the choice: on the model shapes it
// takes 5-34% less CPU time per call than OpenBLAS 0.3.21 (median 22%).
//
// oneDNN is optional: without it (or with KILN_CPU_GEMM=openblas in the environment)
// sgemm() returns false and the caller uses OpenBLAS. Debian's oneDNN is built on
// OpenMP; each call sets the calling thread's OpenMP thread count to 1 around the GEMM
// and restores it, so no OpenMP team is ever started and PyTorch's OpenMP settings in
// the same process are left as they were.
#pragma once

#include <cstdint>

namespace kiln::cpu::onednn {

// Row-major C = A' @ B' + beta * C, A' = A or A^T (trans_a), likewise B'; as cblas_sgemm
// with CblasRowMajor. Returns false (and computes nothing) when oneDNN is not in use.
bool sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace kiln::cpu::onednn
