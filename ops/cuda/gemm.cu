// cuBLAS plumbing for matmul, linear and conv2d (see ops/cuda/gemm.cuh).
#include <cublas_v2.h>

#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ops/cuda/gemm.cuh"

namespace kiln::cuda_impl {
namespace {

void check_cublas(cublasStatus_t s, const char* op, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  cudaGetLastError();
  throw BackendError(detail::cat("[", op, "] ", what, " failed: ", cublasGetStatusName(s), " (",
                                 cublasGetStatusString(s), ")"));
}

struct Handle {
  std::once_flag once;
  std::mutex mutex;  // cuBLAS calls on one handle are serialized
  cublasHandle_t handle = nullptr;
};

// One per device, created on first use and kept for the process (never destroyed, so no
// cuBLAS call runs during static destruction).
Handle& handle_for(int device) {
  static std::mutex mutex;
  static std::vector<Handle*> handles;
  Handle* h;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (handles.empty()) handles.resize(static_cast<size_t>(cuda_context::device_count()), nullptr);
    KILN_CHECK(device >= 0 && device < static_cast<int>(handles.size()), DeviceError,
               "[cublas] device cuda:", device, " does not exist");
    if (!handles[static_cast<size_t>(device)]) handles[static_cast<size_t>(device)] = new Handle();
    h = handles[static_cast<size_t>(device)];
  }
  std::call_once(h->once, [&] {
    DeviceScope scope(device);
    cublasHandle_t handle = nullptr;
    check_cublas(cublasCreate(&handle), "cublas", "cublasCreate");
    check_cublas(cublasSetStream(handle, stream_of(device)), "cublas", "cublasSetStream");
    // A workspace of our own, kept for the process: cuBLAS then never allocates inside a
    // call, which a CUDA Graph capture of a compiled trace (jit/cuda) needs.
    constexpr size_t kWorkspace = size_t{32} << 20;
    void* workspace = nullptr;
    if (cudaMalloc(&workspace, kWorkspace) == cudaSuccess)
      check_cublas(cublasSetWorkspace(handle, workspace, kWorkspace), "cublas",
                   "cublasSetWorkspace");
    else
      cudaGetLastError();
    // Default math: no TF32 for float32 (CUBLAS_COMPUTE_32F below is exact float32 math).
    check_cublas(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublas", "cublasSetMathMode");
    h->handle = handle;
  });
  return *h;
}

// A row-major logical matrix M [rows, cols] with strides (rs, cs) as a cuBLAS operand
// standing for M^T in column-major terms: op N with ld = rs when columns are unit-stride,
// op T with ld = cs when rows are.
struct Operand {
  cublasOperation_t op;
  int64_t ld;
};

bool as_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs, Operand* out) {
  const int64_t rmax = rows > 1 ? rows : 1, cmax = cols > 1 ? cols : 1;
  if (cols == 1 || cs == 1) {
    const int64_t ld = rows == 1 ? cmax : rs;
    if (ld >= cmax && ld <= INT_MAX) {
      *out = {CUBLAS_OP_N, ld};
      return true;
    }
  }
  if (rows == 1 || rs == 1) {
    const int64_t ld = cols == 1 ? rmax : cs;
    if (ld >= rmax && ld <= INT_MAX) {
      *out = {CUBLAS_OP_T, ld};
      return true;
    }
  }
  return false;
}

// cuBLAS's element type for a floating dtype and the type it accumulates in (float32 for
// the 16-bit floats); nullopt for the other dtypes.
struct CublasTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};
constexpr std::optional<CublasTypes> cublas_types(DType d) {
  switch (d) {
    case DType::Float16:
      return CublasTypes{CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::BFloat16:
      return CublasTypes{CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::Float32:
      return CublasTypes{CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::Float64:
      return CublasTypes{CUDA_R_64F, CUBLAS_COMPUTE_64F};
    default:
      return std::nullopt;
  }
}

int to_int(int64_t v, const char* what, const char* op) {
  KILN_CHECK(v <= INT_MAX, ShapeError, "[", op, "] ", what, " ", v,
             " is too large for cuBLAS (at most ", INT_MAX, ")");
  return static_cast<int>(v);
}

template <class T>
__global__ void fill_bias_kernel(T* out, const T* bias, int64_t bias_stride, int64_t n,
                                 int64_t channels, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = bias[((i / inner) % channels) * bias_stride];
}

}  // namespace

bool gemm_fits(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  Operand o;
  return as_operand(rows, cols, row_stride, col_stride, &o);
}

void gemm(DType dtype, int device, const GemmShape& s, const MatrixArg& a, const MatrixArg& b,
          void* c, int64_t ldc, int64_t c_batch_stride, bool accumulate, const char* op) {
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  DeviceScope scope(device);
  const int64_t elem = itemsize(dtype);
  if (s.k == 0) {  // empty sum: C = 0 (or unchanged when accumulating)
    if (accumulate) return;
    for (int64_t i = 0; i < s.batch; ++i) {
      check(cudaMemset2DAsync(static_cast<char*>(c) + i * c_batch_stride * elem,
                              static_cast<size_t>(ldc * elem), 0, static_cast<size_t>(s.n * elem),
                              static_cast<size_t>(s.m), stream_of(device)),
            op, "cudaMemset2DAsync");
    }
    return;
  }
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS computes (n x m) = (n x k)(k x m).
  Operand ob, oa;
  KILN_CHECK(as_operand(s.k, s.n, b.row_stride, b.col_stride, &ob) &&
                 as_operand(s.m, s.k, a.row_stride, a.col_stride, &oa),
             Error, "[", op, "] internal: gemm operand strides do not fit cuBLAS");
  const int m = to_int(s.n, "size", op), n = to_int(s.m, "size", op), k = to_int(s.k, "size", op);
  const int batch = to_int(s.batch, "batch count", op);
  const int ldc_i = to_int(ldc, "leading dimension", op);

  const std::optional<CublasTypes> types = cublas_types(dtype);
  KILN_CHECK(types, DTypeError, "[", op, "] the CUDA matrix product does not support dtype ",
             dtype_name(dtype));
  const cudaDataType_t type = types->data;
  const cublasComputeType_t compute = types->compute;
  // alpha and beta are in the compute type.
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = &one_f;
  const void* beta = accumulate ? &one_f : &zero_f;
  if (compute == CUBLAS_COMPUTE_64F) {
    alpha = &one_d;
    beta = accumulate ? &one_d : &zero_d;
  }
  Handle& h = handle_for(device);
  std::lock_guard<std::mutex> lock(h.mutex);
  if (batch == 1) {
    check_cublas(cublasGemmEx(h.handle, ob.op, oa.op, m, n, k, alpha, b.data, type,
                              static_cast<int>(ob.ld), a.data, type, static_cast<int>(oa.ld), beta,
                              c, type, ldc_i, compute, CUBLAS_GEMM_DEFAULT),
                 op, "cublasGemmEx");
  } else {
    check_cublas(cublasGemmStridedBatchedEx(
                     h.handle, ob.op, oa.op, m, n, k, alpha, b.data, type, static_cast<int>(ob.ld),
                     b.batch_stride, a.data, type, static_cast<int>(oa.ld), a.batch_stride, beta, c,
                     type, ldc_i, c_batch_stride, batch, compute, CUBLAS_GEMM_DEFAULT),
                 op, "cublasGemmStridedBatchedEx");
  }
}

void fill_bias(const Tensor& out, const Tensor& bias, int64_t channels, int64_t inner,
               const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceScope scope(device);
  const int grid = grid_for(n, 256, 1, device);
  const int64_t bstride = bias.dim() == 0 ? 0 : bias.stride(0);
  visit_floating(out.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    fill_bias_kernel<T><<<grid, 256, 0, stream_of(device)>>>(static_cast<T*>(out.data_ptr()),
                                                             static_cast<const T*>(bias.data_ptr()),
                                                             bstride, n, channels, inner);
  });
  cuda_context::check_last_launch(op);
}

}  // namespace kiln::cuda_impl
