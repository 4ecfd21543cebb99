// NvrtcCompiler: CUDA C source -> CUBIN for one device's architecture -> loaded library.
// All kernels of a trace go in one program (one NVRTC call). get() looks in (in order) the
// in-memory table, the disk cache (KernelCache "cuda", keyed by the source hash, the
// architecture and the NVRTC version) and otherwise compiles. Loading goes through the
// runtime's library API (cudaLibraryLoadData), never a link against libcuda. Thread-safe.
// Errors throw std::runtime_error with NVRTC's log (the caller falls back to eager kernels).
//
// The in-memory table is an LRU of at most KILN_KERNEL_CACHE_ENTRIES libraries (default
// 1024): beyond it, the least recently used library that no compiled trace holds
// (CudaModule::pin) is unloaded; asked for again, it comes from the disk cache or is
// compiled again. Libraries held by traces always stay.
//
// KILN_CUDA_JIT_FAIL=1 makes every compile fail (tests of the fallback path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::jit::cuda_backend {

struct CudaModule {
  std::vector<void*> kernels;  // cudaKernel_t per requested name, in order
  enum class Source : uint8_t { Memory, Disk, Compiled } source = Source::Compiled;
  double ms = 0;
  std::string arch;  // "sm_90"
  // Keeps the library loaded: whoever launches the kernels holds this while it may.
  std::shared_ptr<const void> pin;
};

// Source -> CUBIN for an architecture ("sm_90"), no device needed (CI checks the
// generated code compiles). The source may include ops/pointwise_math.h and the headers
// it includes: NVRTC gets them from libkiln (jit/embedded_files.h), never from disk.
// Throws std::runtime_error with NVRTC's log.
std::string compile_cubin(const std::string& source, const std::string& arch);

struct NvrtcStats {
  int64_t compiled = 0, disk_hits = 0, memory_hits = 0;
  int64_t evicted = 0;   // libraries unloaded by the LRU limit
  int64_t resident = 0;  // libraries loaded now (the table's entries)
};

class NvrtcCompiler {
 public:
  static NvrtcCompiler& instance();
  CudaModule get(const std::string& source, const std::vector<std::string>& names, int device);
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
