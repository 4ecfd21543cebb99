// The `epilogue` pass (jit/pipeline.h) of the CUDA target, run last, on the plan once
// `store` has run: `act(a @ b + bias)` into one library step (a cuBLASLt GEMM with an epilogue,
// jit/cuda/cublaslt_matmul.h). The fusion plan leaves a matmul as a library step and its
// `+ bias` (and relu / tanh-GELU) at the head of the next kernel group; when the matmul
// and the add each have that one reader, a and b are 2-D, row-major contiguous and of
// one float dtype, and bias is a contiguous [N] (or [1, N]) computed before the matmul,
// the add and activation move into the matmul's step: the step then writes the
// activation's value (step.op), and the kernel group (dropped when empty) reads it.
#pragma once

#include <map>

#include "jit/cuda/cublaslt_matmul.h"
#include "jit/fusion.h"

namespace kiln::jit::cuda_backend {

struct FoldedMatmul {
  int matmul = -1, add = -1, activation = -1;  // op indices (activation -1: none)
  tracer::InputRef bias;
  Epilogue epilogue = Epilogue::Bias;
  int64_t m = 0, n = 0, k = 0;
};

// Rewrites `plan` in place; returns the folded steps by their (new) step index.
std::map<int, FoldedMatmul> fold_matmul_epilogues(const tracer::TraceProgram& program,
                                                  FusionPlan& plan);

}  // namespace kiln::jit::cuda_backend
