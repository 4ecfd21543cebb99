// KernelCache: compiled kernels on disk, shared by the CPU (object files) and CUDA
// (CUBIN) backends. One file per kernel under the cache directory:
//
//   KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln   (KILN_CACHE_DIR=off
//   disables the disk cache)
//
// Keys name the kernel's IR hash plus what the code depends on (CPU features and LLVM
// version, or GPU architecture and NVRTC version). Each file carries a header with the
// full key, the payload length and a checksum: a truncated, corrupt or mismatched file is
// ignored (and overwritten by the recompiled kernel), never loaded. The directory is
// created private to the user (0700); a directory or file owned by someone else or
// writable by group/others is not trusted. Writes go to a temporary file renamed into
// place, so readers never see half a file; a failed write (full disk) only costs the
// cache entry.
#pragma once

#include <atomic>
#include <optional>
#include <string>

namespace kiln::jit {

struct KernelCacheStats {
  std::atomic<int64_t> hits{0}, misses{0}, rejected{0}, writes{0}, write_failures{0};
};

class KernelCache {
 public:
  // kind: a subdirectory ("cpu", "cuda").
  explicit KernelCache(const std::string& kind);

  static std::string default_root();  // the directory from the environment ("" if off)

  // The payload stored under key, if a trusted, intact file has it. A file that is there
  // but refused (untrusted, truncated, corrupt, another key) sets *why when given.
  std::optional<std::string> load(const std::string& key, std::string* why = nullptr);
  // Stores payload under key; failures are counted, never thrown.
  void store(const std::string& key, const std::string& payload);

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  const std::string& disabled_reason() const { return disabled_reason_; }
  KernelCacheStats& stats() { return stats_; }
  std::string path_for(const std::string& key) const;

 private:
  std::string dir_;
  std::string disabled_reason_;
  KernelCacheStats stats_;
};

}  // namespace kiln::jit
