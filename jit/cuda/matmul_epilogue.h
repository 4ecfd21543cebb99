// The `epilogue` pass (jit/pipeline.h) of the CUDA target, run last, on the plan once
// `store` has run: `act(a @ b + bias + residual)` into one library step (a cuBLASLt GEMM
// with an epilogue and C, jit/cuda/cublaslt_matmul.h). The fusion plan leaves a matmul as
// a library step and the adds after it (and relu / tanh-GELU) at the head of the next
// kernel group; when a and b are 2-D, row-major contiguous and of one float dtype, the
// chain after the matmul (each value's one reader) is adds of a contiguous bias [N] (or
// [1, N]) and of a contiguous residual [M, N] (at most one of each, computed before the
// matmul's step: `x @ wi + h @ wh + b` of an LSTM cell), then optionally the activation,
// they move into the matmul's step: the step then writes the chain's last value
// (step.op), and the kernel group (dropped when empty) reads it.
#pragma once

#include <map>

#include "jit/cuda/cublaslt_matmul.h"
#include "jit/fusion.h"

namespace kiln::jit::cuda_backend {

struct FoldedMatmul {
  // op indices; -1: not in the chain
  int matmul = -1, bias_add = -1, residual_add = -1, activation = -1;
  tracer::InputRef bias, residual;  // their other operands, when folded
  Epilogue epilogue = Epilogue::Bias;
  int64_t m = 0, n = 0, k = 0;
};

// Rewrites `plan` in place; returns the folded steps by their (new) step index.
std::map<int, FoldedMatmul> fold_matmul_epilogues(const tracer::TraceProgram& program,
                                                  FusionPlan& plan);

}  // namespace kiln::jit::cuda_backend
