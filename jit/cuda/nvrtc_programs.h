// Splitting a trace's kernels into NVRTC programs and compiling them concurrently; no
// GPU needed (CUBIN for an architecture). Each program is the prelude once, then some
// kernels' definitions. NVRTC parses the prelude (ops/pointwise_math.h, ops/philox.h)
// once per program, a fixed cost of about half a small kernel's (measured in
// docs/results/nvrtc_compile_cpu.txt); kernels differ by 30x among themselves (a GPT
// step's: 23 ms for a copy, 730 ms for a row kernel with dropout's Philox unrolled in
// it, docs/results/nvrtc_program_balance.txt). So programs are balanced by an estimate
// of each kernel's cost (estimated_compile_ms): at most `threads` programs, each of at
// least kMinProgramMs of estimated work (small traces stay one program), kernels
// assigned longest first to the least loaded program; a kernel heavier than the rest's
// share is a program alone.
//
// nvrtc_threads(): KILN_NVRTC_THREADS (1..64) if set, else the host's cores capped at 16.
// Kernel names come from kernel_name(): a hash of the kernel's definition, so the same
// kernel has the same name in every trace and process (the cache's identity).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::jit::cuda_backend {

struct KernelSource {
  std::string name;  // its entry point (kernel_name)
  std::string body;  // its definition, after the prelude
};

// "kiln_" and 32 hex digits of the definition (emitted under a placeholder name).
std::string kernel_name(const std::string& body_with_placeholder_name);

int nvrtc_threads();

// NVRTC's CPU time for one kernel definition, roughly (ms on this project's build VM):
// a base, the text's length, each unrolled loop and each inlined Philox draw (the
// features that made a GPT step's kernels slow to compile; fitted in
// docs/results/nvrtc_program_balance.txt). Only the programs' balance depends on it.
double estimated_compile_ms(const std::string& body);
constexpr double kMinProgramMs = 200;  // ~4 small kernels: the prelude stays under ~15%

// The programs' kernels (indices into costs, ascending within a program): every kernel
// in exactly one program, at most `threads` programs, one when threads == 1 or the
// estimated total is under 2 * kMinProgramMs.
std::vector<std::vector<size_t>> plan_programs(const std::vector<double>& costs, int threads);

struct CompiledProgram {
  std::vector<size_t> kernels;  // indices into the input
  std::string source;           // prelude + those kernels' definitions
  std::string cubin;
  double ms = 0;  // this program's NVRTC time
};

// Compiles `kernels` as plan_programs(their estimated costs, threads) programs on up to
// `threads` threads (the caller's included). Throws the first program's error (NVRTC's
// log) after every thread has finished.
std::vector<CompiledProgram> compile_programs(const std::string& prelude,
                                              const std::vector<KernelSource>& kernels,
                                              const std::string& arch, int threads);

}  // namespace kiln::jit::cuda_backend
