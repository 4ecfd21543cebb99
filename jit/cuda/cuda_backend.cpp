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
#include "jit/cuda/horizontal.h"
#include "jit/cuda/cuda_trace.h"
#include "jit/cuda/matmul_epilogue.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/cuda/step_profile.h"

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
    k->name = kernel_name(emit_cuda_kernel(k->lowered.kernel, "kiln_k", k->lowered.cols));
    kernel_steps_.push_back(s);
    choose_launch(*k, sms_);
    if (kernels_.size() <= s) kernels_.resize(s + 1);
    kernels_[s] = std::move(k);
  }

  // Horizontal fusion (horizontal.h): which kernel steps launch together, and the combos'
  // code.
  void group_launches(const TraceProgram& program, FusionPlan& plan) override {
    plan_ = &plan;
    std::vector<ComboCandidate> steps(plan.steps.size());
    for (size_t s : kernel_steps_) {
      const CudaKernel& k = *kernels_[s];
      steps[s] = {k.lowered.work > 0, k.grid, k.block, k.block_y, k.layout.words()};
    }
    for (DelayedLaunch& launch : plan_combos(program, plan, steps, sms_)) {
      CudaCombo c;
      c.after = launch.after;
      if (launch.parts.size() == 1) {  // launched alone, later than its place
        c.parts = std::move(launch.parts);
        combos_.push_back(std::move(c));
        continue;
      }
      std::vector<size_t>& parts = launch.parts;
      std::vector<const Kernel*> kernels;
      std::vector<std::string> names, labels;
      std::vector<int> words;
      c.block = kernels_[parts[0]]->block;
      c.block_y = kernels_[parts[0]]->block_y;
      for (size_t s : parts) {
        const CudaKernel& k = *kernels_[s];
        kernels.push_back(&k.lowered.kernel);
        names.push_back(k.name);
        labels.push_back(step_profile::label(program, plan, s, false));
        words.push_back(k.layout.words());
        c.grid += k.grid;
      }
      c.layout = combo_layout(words);
      c.name = kernel_name(emit_combo(kernels, names, "kiln_k"));
      c.label = combo_label(labels);
      c.parts = std::move(parts);
      combo_sources_.push_back({c.name, emit_combo(kernels, names, c.name)});
      combos_.push_back(std::move(c));
    }
  }

  // Compiles the kernels launched on their own and the combos. Combos that fail to
  // compile are given up (their parts launch on their own, noted) before anything else.
  void finish() override {
    if (kernel_steps_.empty()) return;
    std::string combo_note;
    if (!combos_.empty()) {
      try {
        compile(true);
        return;
      } catch (const std::exception& e) {
        combo_note = "; horizontal fusion given up (combo kernels failed to compile: " +
                     std::string(e.what()).substr(0, 400) + ")";
        combos_.clear();
        combo_sources_.clear();
        if (plan_) plan_->launch_at.clear();
      }
    }
    compile(false);
    note_ += combo_note;
  }

  void dump(const DebugDump& dump) const override {
    std::string text = cuda_prelude();
    for (const KernelSource& d : sources_) text += "\n" + d.body;
    dump.write("kernels.cu", text);
  }

  std::string compile_report() const override {
    std::string combos;
    for (const CudaCombo& c : combos_)
      if (c.parts.size() > 1)
        combos += c.name + " (steps " + std::to_string(c.parts.front()) + ".." +
                  std::to_string(c.parts.back()) + ", launched after step " +
                  std::to_string(c.after) + ", " + std::to_string(c.grid) + " blocks): " + c.label +
                  "\n";
    return NvrtcCompiler::instance().version() +
           "\ncache: " + NvrtcCompiler::instance().cache_dir() + "\n" + note_ + "\n" + combos;
  }

  std::unique_ptr<tracer::Executable> instantiate(const TraceProgram& program, FusionPlan plan,
                                                  MemoryPlan memory) override {
    kernels_.resize(plan.steps.size());
    return make_cuda_trace(program, std::move(plan), std::move(memory), std::move(kernels_),
                           std::move(combos_), std::move(folds_), std::move(gemms_), device_,
                           note_);
  }

 private:
  // The sources of the kernels launched on their own (each different one once) and, with
  // `combos`, the combos'; loads or compiles them and hands out the entry points.
  void compile(bool combos) {
    std::vector<size_t> in_combo(kernels_.size(), 0);
    if (combos)
      for (const CudaCombo& c : combos_)
        for (size_t s : c.parts) in_combo[s] = c.parts.size() > 1;
    sources_.clear();
    std::map<std::string, size_t> source_of;  // name -> its index in sources_
    for (size_t s : kernel_steps_) {
      const CudaKernel& k = *kernels_[s];
      if (!in_combo[s] && source_of.emplace(k.name, sources_.size()).second)
        sources_.push_back({k.name, emit_cuda_kernel(k.lowered.kernel, k.name, k.lowered.cols)});
    }
    const size_t standalone = sources_.size();
    if (combos) sources_.insert(sources_.end(), combo_sources_.begin(), combo_sources_.end());
    const CudaKernels loaded =
        NvrtcCompiler::instance().get(cuda_prelude(), sources_, device_.index);
    for (size_t s : kernel_steps_) {
      if (in_combo[s]) continue;
      CudaKernel& k = *kernels_[s];
      const size_t q = source_of.at(k.name);
      k.fn = loaded.kernels[q];
      k.pin = loaded.pins[q];
    }
    if (combos) {
      size_t q = standalone;
      for (CudaCombo& c : combos_) {
        if (c.parts.size() < 2) continue;
        c.fn = loaded.kernels[q];
        c.pin = loaded.pins[q++];
      }
    }
    note_ = loaded.summary(kernel_steps_.size());
  }

  Device device_;
  int sms_;
  std::map<int, FoldedMatmul> folds_;  // by step, from the epilogue pass
  std::map<int, std::unique_ptr<LtMatmul>> gemms_;
  std::vector<std::unique_ptr<CudaKernel>> kernels_;  // per step (null: not a kernel)
  std::vector<KernelSource> sources_;        // what finish() compiled: each different one, once
  std::vector<size_t> kernel_steps_;         // the steps that are kernels, in order
  std::vector<CudaCombo> combos_;            // horizontal fusion: kernels launched together
  std::vector<KernelSource> combo_sources_;  // ... their definitions
  FusionPlan* plan_ = nullptr;               // group_launches' plan (launch_at)
  std::string note_;                         // how finish() got them (CudaKernels::summary)
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
