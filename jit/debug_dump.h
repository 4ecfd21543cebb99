// KILN_DEBUG_DIR=dir: per compiled trace, a folder dir/trace-<pid>-<n>/ with
//   trace.txt     the recorded ops, their wiring and the guards of the inputs
//   fusion.txt    the program before fusion, the plan after it (steps, what is stored,
//                 arena or fresh), the memory plan and each kernel's KernelIR
//   kernel-<i>.ll the optimized LLVM IR of each kernel (or kernel-<i>.cu for CUDA)
//   compile.txt   compile times per phase and per kernel, cache hits, vector widths
#pragma once

#include <chrono>
#include <string>

#include "jit/fusion.h"
#include "jit/memory_plan.h"
#include "tracer/backend.h"

namespace kiln::jit {

// The program as text: one line per op (its inputs, result type, [live]) with the
// guards of each external input where it first appears.
std::string program_text(const tracer::TraceProgram& program);

// Milliseconds since t0 (compile timings).
double ms_since(std::chrono::steady_clock::time_point t0);

class DebugDump {
 public:
  DebugDump();  // reads KILN_DEBUG_DIR; inactive when unset
  bool active() const { return !dir_.empty(); }
  void write(const std::string& file, const std::string& text) const;
  // trace.txt and fusion.txt: the program, the plan after fusion, the memory plan and
  // the kernels' IR (kernel_text).
  void write_plan(const tracer::TraceProgram& program, const FusionPlan& plan,
                  const MemoryPlan& memory, const std::string& kernel_text) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace kiln::jit
