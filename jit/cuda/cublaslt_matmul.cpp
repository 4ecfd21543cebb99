// cuBLASLt GEMM with a fused bias/activation epilogue (see cublaslt_matmul.h). Row-major
// y = a @ b is the column-major product y^T = b^T a^T, so b is cuBLASLt's A operand
// ([n, k], ld n), a is B ([k, m], ld k) and y is D ([n, m], ld n); the epilogue's bias runs
// along D's rows, i.e. over y's columns.
#include "jit/cuda/cublaslt_matmul.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cuda_context.h"

namespace kiln::jit::cuda_backend {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("[cublasLt] ") + what + ": " + cublasGetStatusName(s));
}

constexpr size_t kWorkspace = size_t{32} << 20;

// One handle and one workspace per device, made on first use and kept for the process.
struct DeviceLt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

DeviceLt& device_lt(int device) {
  static std::mutex mutex;
  static std::vector<DeviceLt*> per_device;
  std::lock_guard<std::mutex> lock(mutex);
  if (per_device.size() <= static_cast<size_t>(device)) per_device.resize(device + 1, nullptr);
  DeviceLt*& d = per_device[static_cast<size_t>(device)];
  if (!d) {
    auto* made = new DeviceLt();
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    check(cublasLtCreate(&made->handle), "cublasLtCreate");
    if (cudaMalloc(&made->workspace, kWorkspace) != cudaSuccess) {
      cudaGetLastError();
      cudaSetDevice(previous);
      throw std::runtime_error("[cublasLt] no memory for the 32 MiB workspace");
    }
    cudaSetDevice(previous);
    d = made;
  }
  return *d;
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::Float32:
      return CUDA_R_32F;
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    default:
      throw std::runtime_error(std::string("[cublasLt] no epilogue GEMM for ") + dtype_name(d));
  }
}

}  // namespace

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::Bias:
      return "BIAS";
    case Epilogue::ReluBias:
      return "RELU_BIAS";
    default:
      return "GELU_BIAS";
  }
}

struct LtMatmul::Impl {
  int device = 0;
  DeviceLt* lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Impl() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtMatmul::LtMatmul(int device, DType dtype, int64_t m, int64_t n, int64_t k, Epilogue epilogue)
    : impl_(std::make_unique<Impl>()) {
  Impl& x = *impl_;
  x.device = device;
  x.lt = &device_lt(device);
  const cudaDataType_t t = cuda_type(dtype);
  check(cublasLtMatmulDescCreate(&x.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  const cublasLtEpilogue_t e = epilogue == Epilogue::Bias       ? CUBLASLT_EPILOGUE_BIAS
                               : epilogue == Epilogue::ReluBias ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                                : CUBLASLT_EPILOGUE_GELU_BIAS;
  check(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)),
        "epilogue attribute");
  check(cublasLtMatrixLayoutCreate(&x.a, t, static_cast<uint64_t>(n), static_cast<uint64_t>(k), n),
        "layout of b");
  check(cublasLtMatrixLayoutCreate(&x.b, t, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k),
        "layout of a");
  check(cublasLtMatrixLayoutCreate(&x.d, t, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n),
        "layout of y");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = kWorkspace;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(x.lt->handle, x.op, x.a, x.b, x.d, x.d,
                                                          pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check(s, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) throw std::runtime_error("[cublasLt] no algorithm for this GEMM and epilogue");
  x.algo = result.algo;
}

LtMatmul::~LtMatmul() = default;

void LtMatmul::run(const void* a, const void* b, const void* bias, void* y) const {
  const Impl& x = *impl_;
  check(
      cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
      "bias pointer");
  const float one = 1.0f, zero = 0.0f;
  auto stream = static_cast<cudaStream_t>(cuda_context::stream(x.device));
  check(cublasLtMatmul(x.lt->handle, x.op, &one, b, x.a, a, x.b, &zero, y, x.d, y, x.d, &x.algo,
                       x.lt->workspace, kWorkspace, stream),
        "cublasLtMatmul");
}

}  // namespace kiln::jit::cuda_backend
