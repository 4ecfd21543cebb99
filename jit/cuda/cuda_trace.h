// The compiled form of a CUDA trace (cuda_backend.cpp builds it, cuda_trace.cpp replays
// it): one CudaKernel per fused kernel step, the combos that launch some of them together,
// the epilogue GEMMs of folded library steps, and the FusedTrace around them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jit/cuda/cublaslt_matmul.h"
#include "jit/cuda/cuda_codegen.h"
#include "jit/cuda/horizontal.h"
#include "jit/cuda/matmul_epilogue.h"
#include "jit/fusion.h"
#include "jit/lower.h"
#include "jit/memory_plan.h"
#include "tracer/backend.h"

namespace kiln::jit::cuda_backend {

struct CudaKernel {
  LoweredKernel lowered;
  ArgsLayout layout;
  void* fn = nullptr;
  std::shared_ptr<const void> pin;  // keeps fn's library loaded (NvrtcCompiler's LRU)
  std::string name;                 // kernel_name() of its definition
  unsigned block = 256;
  unsigned block_y = 1;  // row kernels in warp mode: rows per block
  unsigned grid = 1;
};

// Kernel steps launched after step `after` (horizontal.h): one part, launched alone with
// its own kernel; more, as one combo kernel.
struct CudaCombo {
  std::vector<size_t> parts;  // steps, increasing
  size_t after = 0;
  ComboLayout layout;
  void* fn = nullptr;
  std::shared_ptr<const void> pin;
  std::string name;   // kernel_name() of its definition
  std::string label;  // combo_label() of its parts' step labels
  unsigned grid = 0, block = 256, block_y = 1;
};

std::unique_ptr<tracer::Executable> make_cuda_trace(
    tracer::TraceProgram program, FusionPlan plan, MemoryPlan memory,
    std::vector<std::unique_ptr<CudaKernel>> kernels, std::vector<CudaCombo> combos,
    std::map<int, FoldedMatmul> folds, std::map<int, std::unique_ptr<LtMatmul>> gemms,
    Device device, std::string compile_note);

}  // namespace kiln::jit::cuda_backend
