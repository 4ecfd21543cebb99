// LtMatmul: y = act(a @ b [+ c] [+ bias]) as one cuBLASLt call, the bias and activation
// done by the GEMM's epilogue (DEFAULT, RELU, GELU or their _BIAS forms; GELU is the tanh
// form) and c, when `accumulate`, as cuBLASLt's C with beta 1 (c may be y itself), for
// row-major contiguous a [M, K], b [K, N], bias [N], c and y [M, N] of one float dtype on
// one CUDA device. float32 math (no TF32), like the eager matmul. The algorithm is chosen
// once, when the plan is made; run() enqueues on the device's kiln stream (so it can be
// captured in a CUDA Graph) and throws std::runtime_error on failure.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/dtype.h"

namespace kiln::jit::cuda_backend {

enum class Epilogue : uint8_t { None, Relu, Gelu, Bias, ReluBias, GeluBias };
bool has_bias(Epilogue e);
const char* epilogue_name(Epilogue e);

class LtMatmul {
 public:
  LtMatmul(int device, DType dtype, int64_t m, int64_t n, int64_t k, Epilogue epilogue,
           bool accumulate = false);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  // bias: ignored unless has_bias(epilogue); c: unless accumulate.
  void run(const void* a, const void* b, const void* bias, const void* c, void* y) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::jit::cuda_backend
