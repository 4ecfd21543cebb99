// The CUDA trace backend: for the compile driver (jit/compile_driver.h), the epilogue
// pass (matmul + bias + activation as one cuBLASLt GEMM) and CUDA C for every fusion
// group, named by its content and compiled by NVRTC (kernels loaded already are
// reused, the rest compiled as a few programs in parallel; jit/cuda/nvrtc_compiler.h)
// -> a compiled CUDA trace (jit/cuda/cuda_trace.h), replayed as CUDA Graphs. A group that
// cannot be lowered or compiled runs eagerly (noted); a program not entirely on one CUDA
// device is declined.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>

#include "jit/compile_driver.h"
#include "jit/cuda/cuda_codegen.h"
#include "jit/cuda/cuda_trace.h"
#include "jit/cuda/matmul_epilogue.h"
#include "jit/cuda/nvrtc_compiler.h"

namespace kiln::jit::cuda_backend {
namespace {

using tracer::TraceOp;
using tracer::TraceProgram;

// Block shape and grid for a kernel (see cuda_codegen.h): pointwise 256 threads, about
// 4 elements each per sweep; short rows one warp per row, 4 rows per block; longer rows
// one block of up to 256 threads per row, up to 8 elements per thread in registers.
void choose_launch(CudaKernel& k, int sms) {
  const LoweredKernel& l = k.lowered;
  int64_t units;
  if (l.kernel.kind == Kernel::Kind::Pointwise) {
    k.block = 256;
    units = (l.work + 1023) / 1024;
  } else if (l.cols <= warp_row_limit(l.kernel)) {
    k.block = 32;
    k.block_y = 4;
    units = (l.work + 3) / 4;
  } else {
    k.block = 32;
    while (k.block < 256 && static_cast<int64_t>(k.block) * 8 < l.cols) k.block *= 2;
    units = l.work;
  }
  k.grid = static_cast<unsigned>(std::clamp<int64_t>(units, 1, static_cast<int64_t>(sms) * 32));
}

// One attempt's CUDA code: the epilogue pass's GEMMs, then the CUDA C of every kernel
// group, each named by a hash of its definition (identical groups share one kernel),
// loaded or compiled by NvrtcCompiler in finish().
class CudaKernelBuild final : public KernelBuild {
 public:
  CudaKernelBuild(Device device, int sms) : device_(device), sms_(sms) {}

  void fold_epilogues(const TraceProgram& program, FusionPlan& plan) override {
    try {
      folds_ = fold_matmul_epilogues(program, plan);
      for (const auto& [s, f] : folds_)
        gemms_[s] = std::make_unique<LtMatmul>(device_.index, program.ops[f.matmul].meta.dtype, f.m,
                                               f.n, f.k, f.epilogue);
    } catch (const std::exception& e) {
      throw PassFailed(Pass::Epilogue, std::string("matmul epilogues left unfused: ") + e.what());
    }
  }

  void add(size_t s, const FusionGroup&, LoweredKernel lowered) override {
    auto k = std::make_unique<CudaKernel>();
    k->lowered = std::move(lowered);
    k->layout = args_layout(k->lowered.kernel);
    k->name = kernel_name(emit_cuda_kernel(k->lowered.kernel, "kiln_k"));
    if (source_of_.emplace(k->name, sources_.size()).second)
      sources_.push_back({k->name, emit_cuda_kernel(k->lowered.kernel, k->name)});
    kernel_steps_.push_back(s);
    choose_launch(*k, sms_);
    if (kernels_.size() <= s) kernels_.resize(s + 1);
    kernels_[s] = std::move(k);
  }

  void finish() override {
    if (kernel_steps_.empty()) return;
    const CudaKernels loaded =
        NvrtcCompiler::instance().get(cuda_prelude(), sources_, device_.index);
    for (size_t s : kernel_steps_) {
      CudaKernel& k = *kernels_[s];
      const size_t q = source_of_.at(k.name);
      k.fn = loaded.kernels[q];
      k.pin = loaded.pins[q];
    }
    note_ = loaded.summary(kernel_steps_.size());
  }

  void dump(const DebugDump& dump) const override {
    std::string text = cuda_prelude();
    for (const KernelSource& d : sources_) text += "\n" + d.body;
    dump.write("kernels.cu", text);
  }

  std::string compile_report() const override {
    return NvrtcCompiler::instance().version() +
           "\ncache: " + NvrtcCompiler::instance().cache_dir() + "\n" + note_ + "\n";
  }

  std::unique_ptr<tracer::Executable> instantiate(const TraceProgram& program, FusionPlan plan,
                                                  MemoryPlan memory) override {
    kernels_.resize(plan.steps.size());
    return make_cuda_trace(program, std::move(plan), std::move(memory), std::move(kernels_),
                           std::move(folds_), std::move(gemms_), device_, note_);
  }

 private:
  Device device_;
  int sms_;
  std::map<int, FoldedMatmul> folds_;  // by step, from the epilogue pass
  std::map<int, std::unique_ptr<LtMatmul>> gemms_;
  std::vector<std::unique_ptr<CudaKernel>> kernels_;  // per step (null: not a kernel)
  std::vector<KernelSource> sources_;                 // each different kernel's definition, once
  std::map<std::string, size_t> source_of_;           // name -> its index in sources_
  std::vector<size_t> kernel_steps_;                  // the steps that are kernels, in order
  std::string note_;  // how finish() got them (CudaKernels::summary)
};

class NvrtcCudaBackend final : public JitBackend {
 public:
  NvrtcCudaBackend() : JitBackend(DeviceType::CUDA) {}

 protected:
  // Every op on one CUDA device, or a host-side op reading host values only (a batch
  // built on the CPU and copied in: it runs before the launch).
  bool accepts(const TraceProgram& program) const override {
    const Device device = tracer::home_device(program);
    if (!device.is_cuda()) return false;
    for (const TraceOp& op : program.ops) {
      if (op.meta.device == device) continue;
      if (!op.meta.device.is_cpu()) return false;
      for (const tracer::InputRef& r : op.inputs)
        if (r.kind == tracer::InputRef::Kind::Value && !program.ops[r.index].meta.device.is_cpu())
          return false;
    }
    return true;
  }

  std::unique_ptr<KernelBuild> start(const TraceProgram& program, const DebugDump&) override {
    const Device device = tracer::home_device(program);
    int sms = 1;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index) != cudaSuccess) {
      cudaGetLastError();
      sms = 1;
    }
    return std::make_unique<CudaKernelBuild>(device, sms);
  }
};

struct Registration {
  Registration() {
    static NvrtcCudaBackend backend;
    tracer::register_backend(&backend);
  }
} registration;

}  // namespace
}  // namespace kiln::jit::cuda_backend
