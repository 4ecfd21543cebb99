// LtMatmul: y = act(a @ b + bias) as one cuBLASLt call, the bias and activation done by
// the GEMM's epilogue (BIAS, RELU_BIAS or GELU_BIAS, the tanh form of GELU), for
// row-major contiguous a [M, K], b [K, N], bias [N] and y [M, N] of one float dtype on one
// CUDA device. float32 math (no TF32), like the eager matmul. The algorithm is chosen
// once, when the plan is made; run() enqueues on the device's kiln stream (so it can be
// captured in a CUDA Graph) and throws std::runtime_error on failure.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/dtype.h"

namespace kiln::jit::cuda_backend {

enum class Epilogue : uint8_t { Bias, ReluBias, GeluBias };
const char* epilogue_name(Epilogue e);

class LtMatmul {
 public:
  LtMatmul(int device, DType dtype, int64_t m, int64_t n, int64_t k, Epilogue epilogue);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  void run(const void* a, const void* b, const void* bias, void* y) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::jit::cuda_backend
