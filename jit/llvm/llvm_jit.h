// LlvmJit: the process's one ORC LLJIT, shared by every thread. get(kernel) returns the
// kernel's entry point from (in order) the in-memory table, the disk cache (an object
// file added to the JIT as is, no LLVM passes run) or a fresh compile:
//   IRBuilder module (jit/llvm/codegen) -> the ops' scalar functions linked in
//   (jit/llvm/scalar_functions) -> O3 for the host CPU (its name and features,
//   glibc's libmvec as the vector math library when it loads) -> object file -> disk cache
//   -> linked into the JIT.
// The table and the disk cache are behind a mutex; a compile runs outside it (each thread
// with its own TargetMachine), so kernels compile in parallel (jit/llvm/cpu_backend.cpp
// compiles a trace's kernels on several threads). Errors throw std::runtime_error (the
// caller falls back to eager kernels).
//
// The in-memory table is an LRU of at most KILN_KERNEL_CACHE_ENTRIES kernels (default
// 1024): beyond it, the least recently used kernel that no compiled trace holds (see
// KernelBinary::pin) is unlinked from the JIT, its code freed; asked for again, it comes
// from the disk cache or is compiled again. Kernels held by traces always stay.
//
// KILN_LLVM_JIT_FAIL=1 makes every compile fail (tests of the eager fallback); kernels
// already in memory or on disk still load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "jit/kernel_ir.h"

namespace kiln::jit::llvm_backend {

using KernelFn = void (*)(void* const* operands, const int64_t* shape, const int64_t* strides,
                          const int64_t* scalars, int64_t begin, int64_t end);

struct KernelBinary {
  KernelFn fn = nullptr;
  std::string key;
  enum class Source : uint8_t { Memory, Disk, Compiled } source = Source::Compiled;
  double ms = 0;         // time get() took
  std::string llvm_ir;   // optimized LLVM IR, when compiled with keep_ir
  int vector_width = 0;  // widest vector register width (bits) in the optimized IR
  // Keeps the code loaded: whoever calls fn holds this as long as it may call it.
  std::shared_ptr<const void> pin;
};

struct LlvmJitStats {
  int64_t compiled = 0, disk_hits = 0, memory_hits = 0;
  int64_t evicted = 0;   // kernels unlinked by the LRU limit
  int64_t resident = 0;  // kernels linked now (the table's entries)
};

class LlvmJit {
 public:
  static LlvmJit& instance();
  // keep_ir: also return the optimized LLVM IR (for KILN_DEBUG_DIR). Thread-safe; several
  // threads compile different kernels at once.
  // `text`: kernel.text() when the caller has it (else get() makes it).
  KernelBinary get(const Kernel& kernel, bool keep_ir = false, const std::string* text = nullptr);
  // The kernel of this text when the in-memory table has it (a memory hit, as get()
  // counts it), else nullopt; never compiles or reads the disk cache. Cheap: a trace
  // bound to new sizes finds its kernels here without starting compile threads.
  std::optional<KernelBinary> find_loaded(const std::string& text);
  // KILN_LLVM_JIT_FAIL is set: get() compiles nothing (it still finds cached kernels).
  static bool compile_refused();
  LlvmJitStats stats() const;
  std::string host() const;  // "skylake-avx512 +avx2,+avx512f,..." and the LLVM version
  std::string cache_dir() const;
  // The LRU limit (KILN_KERNEL_CACHE_ENTRIES at start); applied from the next get().
  void set_max_entries(size_t entries);
  size_t max_entries() const;
  // Forgets the in-memory table's view of what is loaded (tests of the disk cache use a
  // fresh key space instead; compiled code stays loaded for the process's lifetime).
  ~LlvmJit();

 private:
  LlvmJit();
  struct Impl;
  Impl* impl_;
};

}  // namespace kiln::jit::llvm_backend
