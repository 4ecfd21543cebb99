// The compile driver both JIT backends share (LLVM on the CPU, NVRTC on CUDA): a trace
// is planned (jit/pipeline.h), every kernel group lowered (jit/lower.h) and handed to the
// backend's code generator, the backend compiles, and the backend's Executable comes out.
// What fails falls back instead of failing the trace, and is a note in explain():
//   - a group that cannot be lowered or generated is banned (its ops run their eager
//     kernels) and the trace is planned again;
//   - a batch compile that fails (NVRTC's one program per trace) bans every group in it;
//   - a target pass that throws PassFailed (a cuBLASLt epilogue GEMM that cannot be set
//     up) is switched off for this trace and the trace is planned again.
// A backend supplies only what differs: which programs it takes and a KernelBuild.
#pragma once

#include <memory>
#include <stdexcept>

#include "jit/debug_dump.h"
#include "jit/lower.h"
#include "jit/memory_plan.h"
#include "jit/pass_set.h"

namespace kiln::jit {

// Thrown by a target pass that cannot finish; what() is the note for explain().
struct PassFailed : std::runtime_error {
  PassFailed(Pass failed, const std::string& note) : std::runtime_error(note), pass(failed) {}
  Pass pass;
};

// One attempt's code for one plan, made by the backend and fed by the driver.
class KernelBuild {
 public:
  virtual ~KernelBuild() = default;
  // The epilogue pass for this target (jit/pipeline.h); may throw PassFailed.
  virtual void fold_epilogues(const tracer::TraceProgram& program, FusionPlan& plan) {}
  // Code for the kernel of step `step`, the group lowered (called in step order). Throws
  // when it cannot: that group runs eagerly.
  virtual void add(size_t step, const FusionGroup& group, LoweredKernel lowered) = 0;
  // Once every group is added: the target may launch some kernels together (CUDA:
  // horizontal fusion, jit/cuda/horizontal.h), filling plan.launch_at. `plan` stays alive
  // and is the one instantiated, unless finish() throws.
  virtual void group_launches(const tracer::TraceProgram& program, FusionPlan& plan) {}
  // Compiles what add() left to compile as one batch. Throws: every group runs eagerly.
  virtual void finish() {}
  // KILN_DEBUG_DIR: the backend's own files, and compile.txt's lines before "total:".
  virtual void dump(const DebugDump& dump) const {}
  virtual std::string compile_report() const = 0;
  // The executable replaying `plan` with the compiled kernels.
  virtual std::unique_ptr<tracer::Executable> instantiate(const tracer::TraceProgram& program,
                                                          FusionPlan plan, MemoryPlan memory) = 0;
};

class JitBackend : public tracer::TraceBackend {
 public:
  std::unique_ptr<tracer::Executable> compile(const tracer::TraceProgram& program) final;

 protected:
  explicit JitBackend(DeviceType target) : target_(target) {}
  // Whether this backend compiles the program (every op on its device).
  virtual bool accepts(const tracer::TraceProgram& program) const = 0;
  // A fresh build for one attempt; `dump` outlives it.
  virtual std::unique_ptr<KernelBuild> start(const tracer::TraceProgram& program,
                                             const DebugDump& dump) = 0;

 private:
  DeviceType target_;
};

}  // namespace kiln::jit
