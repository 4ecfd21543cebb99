// The three ways kiln can run the same C++ code, as the differential tests switch them:
// eager (tracer off), traced and interpreted (tracer on, compiled traces run their ops'
// eager kernels one by one: KILN_JIT=0) and traced and JIT-compiled (LLVM on the CPU,
// NVRTC on CUDA). RunModeScope sets one up on a fresh tracer and restores the settings
// it found when it ends.
#pragma once

#include <string>

#include "tracer/api.h"
#include "tracer/config.h"

namespace kt {

enum class RunMode { Eager, Interpreted, Jit };

inline const char* mode_name(RunMode m) {
  switch (m) {
    case RunMode::Eager:
      return "eager";
    case RunMode::Interpreted:
      return "interpreted";
    case RunMode::Jit:
      return "jit";
  }
  return "?";
}

class RunModeScope {
 public:
  explicit RunModeScope(RunMode mode, int warmup = 2)
      : saved_(kiln::tracer::config()), saved_enabled_(kiln::tracer::enabled()) {
    kiln::tracer::reset();
    kiln::tracer::config().warmup = warmup;
    kiln::tracer::config().verify = false;
    kiln::tracer::config().jit = mode == RunMode::Jit;
    kiln::tracer::set_enabled(mode != RunMode::Eager);
  }
  ~RunModeScope() {
    kiln::tracer::reset();
    kiln::tracer::config() = saved_;
    kiln::tracer::set_enabled(saved_enabled_);
  }
  RunModeScope(const RunModeScope&) = delete;
  RunModeScope& operator=(const RunModeScope&) = delete;

 private:
  kiln::tracer::TracerConfig saved_;
  bool saved_enabled_;
};

}  // namespace kt
