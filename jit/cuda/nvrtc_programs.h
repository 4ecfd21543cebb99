// Splitting a trace's kernels into NVRTC programs and compiling them concurrently; no
// GPU needed (CUBIN for an architecture). Each program is the prelude once, then some
// kernels' definitions. NVRTC parses the prelude (ops/pointwise_math.h, ops/philox.h)
// once per program, a fixed cost of about half a small kernel's (measured in
// docs/results/nvrtc_compile_cpu.txt), so a program gets at least
// kMinKernelsPerProgram kernels (the prelude then costs at most ~15% of a program):
// traces of fewer than 2 * kMinKernelsPerProgram kernels stay one program, larger ones
// are split into at most `threads` programs of about equal size, one per thread.
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
constexpr size_t kMinKernelsPerProgram = 4;

// The programs' kernels (indices into n kernels, in order): contiguous ranges, one range
// when n < 2 * kMinKernelsPerProgram or threads == 1.
std::vector<std::vector<size_t>> chunk_kernels(size_t n, int threads);

struct CompiledProgram {
  std::vector<size_t> kernels;  // indices into the input
  std::string source;           // prelude + those kernels' definitions
  std::string cubin;
  double ms = 0;  // this program's NVRTC time
};

// Compiles `kernels` as chunk_kernels(kernels.size(), threads) programs on up to
// `threads` threads (the caller's included). Throws the first program's error (NVRTC's
// log) after every thread has finished.
std::vector<CompiledProgram> compile_programs(const std::string& prelude,
                                              const std::vector<KernelSource>& kernels,
                                              const std::string& arch, int threads);

}  // namespace kiln::jit::cuda_backend
