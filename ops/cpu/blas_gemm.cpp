#include "ops/cpu/blas_gemm.h"

#include <cblas.h>
#include <strings.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>
#include <string>

#include "ops/cpu/onednn_gemm.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

struct BlasLayout {
  CBLAS_TRANSPOSE transpose = CblasNoTrans;
  int64_t leading = 1;
  bool readable = false;
};

// Row-major BLAS reads an operand either as stored (NoTrans: unit column stride,
// leading dim = row stride >= cols) or as the transpose of a row-major matrix (Trans:
// unit row stride, leading dim = column stride >= rows).
BlasLayout blas_layout(const GemmOperand& m) {
  BlasLayout layout;
  const bool one_row = m.rows <= 1, one_col = m.cols <= 1;
  if ((m.col_stride == 1 || one_col) && (one_row || m.row_stride >= std::max<int64_t>(m.cols, 1))) {
    layout.transpose = CblasNoTrans;
    layout.leading = one_row ? std::max<int64_t>(m.cols, 1) : m.row_stride;
    layout.readable = true;
  } else if ((m.row_stride == 1 || one_row) &&
             (one_col || m.col_stride >= std::max<int64_t>(m.rows, 1))) {
    layout.transpose = CblasTrans;
    layout.leading = one_col ? std::max<int64_t>(m.rows, 1) : m.col_stride;
    layout.readable = true;
  }
  return layout;
}

constexpr int64_t kBlasIntMax = std::numeric_limits<blasint>::max();

void make_blas_single_threaded() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

// Whether OpenBLAS runs kernels made for this CPU's vector units. Debian's OpenBLAS 0.3.21
// picks its kernels at load time from the CPU's model number; on a Sapphire Rapids VM
// (AVX-512) it falls back to "Prescott" (SSE3) and runs float32 GEMMs at 40 GF/s, 7x
// slower than oneDNN on the same box (docs/cpu_matmul.md, session 35).
bool openblas_fits_this_cpu() {
  static const bool fits = [] {
    if (!__builtin_cpu_supports("avx2")) return true;
    const std::string core = openblas_get_corename();
    for (const char* vector_core :
         {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", "Excavator"}) {
      if (strcasecmp(core.c_str(), vector_core) == 0) return true;
    }
    return false;
  }();
  return fits;
}

// Whether oneDNN's sgemm suits these leading dimensions. Debian's oneDNN 2.6 ran up to
// 2x slower than with the same matrices at another address on one host (session 31),
// when an operand's rows were a multiple of 4 KiB apart and it was 64-byte aligned (as
// kiln's allocations are): [128, 1024] @ [1024, 1024] took 2.9 ms aligned, 1.8 ms 16 bytes
// off, and OpenBLAS 1.76 ms either way. Such calls go to OpenBLAS when OpenBLAS has
// kernels for this CPU; another host (session 35) shows no such penalty, and there
// OpenBLAS's fallback kernels would be 7x slower (docs/cpu_matmul.md).
bool onednn_suits(int64_t lda, int64_t ldb, int64_t ldc) {
  constexpr int64_t kPageFloats = 4096 / sizeof(float);
  if (!openblas_fits_this_cpu()) return true;
  return lda % kPageFloats != 0 && ldb % kPageFloats != 0 && ldc % kPageFloats != 0;
}

// One single-threaded BLAS call; k > 0, m > 0, n > 0.
void blas_gemm(DType dtype, const GemmOperand& a, const GemmOperand& b, void* c, int64_t ldc,
               bool accumulate) {
  const BlasLayout la = blas_layout(a), lb = blas_layout(b);
  assert(la.readable && lb.readable);
  const auto m = static_cast<blasint>(a.rows), n = static_cast<blasint>(b.cols);
  const auto k = static_cast<blasint>(a.cols);
  const auto lda = static_cast<blasint>(la.leading), ldb = static_cast<blasint>(lb.leading);
  const auto ldc_blas = static_cast<blasint>(std::max<int64_t>(ldc, 1));
  if (dtype == DType::Float32) {
    if (onednn_suits(la.leading, lb.leading, ldc) &&
        onednn::sgemm(la.transpose == CblasTrans, lb.transpose == CblasTrans, a.rows, b.cols,
                      a.cols, static_cast<const float*>(a.data), la.leading,
                      static_cast<const float*>(b.data), lb.leading, accumulate ? 1.0f : 0.0f,
                      static_cast<float*>(c), std::max<int64_t>(ldc, 1)))
      return;
    cblas_sgemm(CblasRowMajor, la.transpose, lb.transpose, m, n, k, 1.0f,
                static_cast<const float*>(a.data), lda, static_cast<const float*>(b.data), ldb,
                accumulate ? 1.0f : 0.0f, static_cast<float*>(c), ldc_blas);
  } else {
    cblas_dgemm(CblasRowMajor, la.transpose, lb.transpose, m, n, k, 1.0,
                static_cast<const double*>(a.data), lda, static_cast<const double*>(b.data), ldb,
                accumulate ? 1.0 : 0.0, static_cast<double*>(c), ldc_blas);
  }
}

GemmOperand row_block(GemmOperand m, int64_t first, int64_t count, int64_t element) {
  m.data = static_cast<const char*>(m.data) + first * m.row_stride * element;
  m.rows = count;
  return m;
}

GemmOperand column_block(GemmOperand m, int64_t first, int64_t count, int64_t element) {
  m.data = static_cast<const char*>(m.data) + first * m.col_stride * element;
  m.cols = count;
  return m;
}

}  // namespace

bool gemm_can_read(const GemmOperand& m) {
  const BlasLayout layout = blas_layout(m);
  return layout.readable && layout.leading <= kBlasIntMax && m.rows <= kBlasIntMax &&
         m.cols <= kBlasIntMax;
}

void gemm(DType dtype, const GemmOperand& a, const GemmOperand& b, void* c, int64_t ldc,
          bool accumulate) {
  assert(a.cols == b.rows);
  assert(dtype == DType::Float32 || dtype == DType::Float64);
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  const int64_t element = itemsize(dtype);
  char* c_bytes = static_cast<char*>(c);
  if (k == 0) {
    if (!accumulate) {
      for (int64_t r = 0; r < m; ++r)
        std::memset(c_bytes + r * ldc * element, 0, static_cast<size_t>(n * element));
    }
    return;
  }
  make_blas_single_threaded();
  const int64_t threads = num_threads();
  if (threads == 1 || m * n * k <= kSplitGemmWork) {
    blas_gemm(dtype, a, b, c, ldc, accumulate);
    return;
  }
  // One block of C per thread, along its longer side.
  if (m >= n) {
    parallel_for(0, m, (m + threads - 1) / threads, [&](int64_t lo, int64_t hi) {
      blas_gemm(dtype, row_block(a, lo, hi - lo, element), b, c_bytes + lo * ldc * element, ldc,
                accumulate);
    });
  } else {
    parallel_for(0, n, (n + threads - 1) / threads, [&](int64_t lo, int64_t hi) {
      blas_gemm(dtype, a, column_block(b, lo, hi - lo, element), c_bytes + lo * element, ldc,
                accumulate);
    });
  }
}

}  // namespace kiln::cpu
