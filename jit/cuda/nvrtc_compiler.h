// NvrtcCompiler: a trace's kernels (CUDA C, named by a hash of their definition, see
// nvrtc_programs.h) -> CUBIN for one device's architecture -> loaded kernels. Loading
// goes through the runtime's library API (cudaLibraryLoadData), never a link against
// libcuda. Errors throw std::runtime_error with NVRTC's log (the caller falls back to
// eager kernels).
//
// get() asks for each kernel, by name:
//   1. the process-wide kernel table (name -> loaded kernel): a kernel any trace of this
//      process loaded before is reused (six identical layers cost one layer's kernels);
//   2. the disk cache (KernelCache "cuda"): an index entry per kernel names the program
//      whose CUBIN holds it, stored under the program's source hash; keys carry the
//      architecture, the NVRTC version and a digest of the prelude and embedded headers;
//   3. otherwise the kernels still missing are compiled as a few programs on up to
//      nvrtc_threads() threads (compile_programs) and stored on disk.
// Thread-safe: the mutex guards the tables only; no compile, disk access, load or unload
// runs under it (libraries dropped by the LRU are unloaded after it is released), and no
// other lock is taken while it is held. Two threads missing the same kernel may both
// compile it; the later entry wins, both are correct.
//
// Ownership: the LRU of loaded libraries (one per program, so up to nvrtc_threads() per
// trace compiled), at most KILN_KERNEL_CACHE_ENTRIES (default 1024), owns them. Beyond the limit,
// the least recently used library no compiled trace holds (a kernel's pin) is unloaded; libraries
// held by traces stay. The kernel table holds weak references: it never keeps a library loaded, an
// entry whose library was unloaded is a miss (then disk or compile), and expired entries are swept.
// A table hit marks its library recently used.
//
// KILN_CUDA_JIT_FAIL=1 makes every compile fail (tests of the fallback path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/cuda/nvrtc_programs.h"

namespace kiln::jit::cuda_backend {

// What get() loaded, per requested kernel in order, and how.
struct CudaKernels {
  std::vector<void*> kernels;                     // cudaKernel_t
  std::vector<std::shared_ptr<const void>> pins;  // each keeps its kernel's library loaded
  std::string arch;                               // "sm_90"
  int64_t unique = 0;                             // different kernels asked for
  int64_t reused = 0;                             // ... found loaded in this process
  int64_t from_disk = 0;                          // ... loaded from the disk cache
  int64_t compiled = 0;                           // ... compiled now,
  int64_t programs = 0;                           // as this many NVRTC programs
  int threads = 0;                                // on this many threads
  double nvrtc_ms = 0;                            // the programs' NVRTC time, summed over threads
  double ms = 0;                                  // wall time of get()
  // "375 kernel(s), 60 different: 12 loaded already, 0 from disk, 48 compiled as 4
  // program(s) on 4 thread(s) (3100 ms of NVRTC time in all), 820 ms wall, sm_90"
  std::string summary(size_t requested) const;
};

// Source -> CUBIN for an architecture ("sm_90"), no device needed (CI checks the
// generated code compiles). The source may include ops/pointwise_math.h and the headers
// it includes: NVRTC gets them from libkiln (jit/embedded_files.h), never from disk.
// Throws std::runtime_error with NVRTC's log.
std::string compile_cubin(const std::string& source, const std::string& arch);

struct NvrtcStats {
  int64_t compiled = 0, disk_hits = 0, memory_hits = 0;  // kernels
  int64_t programs = 0;                                  // NVRTC programs compiled
  int64_t evicted = 0;                                   // libraries unloaded by the LRU limit
  int64_t resident = 0;                                  // libraries loaded now (the LRU's entries)
  int64_t table = 0;  // kernel table entries (live or expired, until swept)
};

class NvrtcCompiler {
 public:
  static NvrtcCompiler& instance();
  // The kernels (names unique or repeated) for `device`, each defined after `prelude`.
  CudaKernels get(const std::string& prelude, const std::vector<KernelSource>& kernels, int device);
  NvrtcStats stats() const;
  std::string cache_dir() const;
  std::string version() const;  // "nvrtc 13.0"
  // The LRU limit (KILN_KERNEL_CACHE_ENTRIES at start); applied from the next get().
  void set_max_entries(size_t entries);

 private:
  NvrtcCompiler();
  struct Impl;
  Impl* impl_;
};

}  // namespace kiln::jit::cuda_backend
