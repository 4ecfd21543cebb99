// A trace backend slower than eager on purpose, for the speed check's tests: it runs the
// trace through the eager kernels (results equal eager) after sleeping `delay`. While a
// SlowBackendScope lives, it is tried before every other backend.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "tracer/api.h"
#include "tracer/background_compile.h"
#include "tracer/backend.h"

namespace kt {

class SlowBackend final : public kiln::tracer::TraceBackend {
 public:
  explicit SlowBackend(std::chrono::microseconds delay) : delay_(delay) {}
  std::unique_ptr<kiln::tracer::Executable> compile(
      const kiln::tracer::TraceProgram& program) override {
    return std::make_unique<Slow>(program, delay_);
  }

 private:
  class Slow final : public kiln::tracer::Executable {
   public:
    Slow(kiln::tracer::TraceProgram program, std::chrono::microseconds delay)
        : program_(std::move(program)), delay_(delay) {}
    void run(const std::vector<kiln::Tensor>& externals, const std::vector<kiln::Scalar>& scalars,
             std::vector<kiln::Tensor>& values, const std::vector<bool>&) const override {
      std::this_thread::sleep_for(delay_);
      kiln::tracer::interpret(program_, program_.ops.size(), externals, scalars, values);
    }
    int kernel_count() const override { return static_cast<int>(program_.ops.size()); }
    const char* backend_name() const override { return "slow (test)"; }

   private:
    kiln::tracer::TraceProgram program_;
    std::chrono::microseconds delay_;
  };
  std::chrono::microseconds delay_;
};

// A backend whose compile takes `delay` (then runs the trace through the eager kernels,
// results equal eager), or throws when `fail` is set: for the background compile's tests.
class DelayedCompileBackend final : public kiln::tracer::TraceBackend {
 public:
  DelayedCompileBackend(std::chrono::microseconds delay, bool fail) : delay_(delay), fail_(fail) {}
  std::unique_ptr<kiln::tracer::Executable> compile(
      const kiln::tracer::TraceProgram& program) override {
    ++compiles;
    std::this_thread::sleep_for(delay_);
    if (fail_) throw std::runtime_error("[test] the delayed backend's compile failed");
    return kiln::tracer::interpreting_backend().compile(program);
  }
  std::atomic<int> compiles{0};

 private:
  std::chrono::microseconds delay_;
  bool fail_;
};

class DelayedCompileScope {
 public:
  explicit DelayedCompileScope(std::chrono::microseconds delay, bool fail = false)
      : backend_(delay, fail) {
    kiln::tracer::wait_for_running_compile();  // the backend list changes under no compile
    kiln::tracer::register_backend_first(&backend_);
  }
  ~DelayedCompileScope() {
    kiln::tracer::wait_for_compiles();  // none may run into a backend that is gone
    kiln::tracer::wait_for_running_compile();
    kiln::tracer::unregister_backend(&backend_);
  }
  DelayedCompileScope(const DelayedCompileScope&) = delete;
  DelayedCompileScope& operator=(const DelayedCompileScope&) = delete;
  int compiles() const { return backend_.compiles; }

 private:
  DelayedCompileBackend backend_;
};

class SlowBackendScope {
 public:
  explicit SlowBackendScope(std::chrono::microseconds delay = std::chrono::milliseconds(3))
      : backend_(delay) {
    kiln::tracer::register_backend_first(&backend_);
  }
  ~SlowBackendScope() { kiln::tracer::unregister_backend(&backend_); }
  SlowBackendScope(const SlowBackendScope&) = delete;
  SlowBackendScope& operator=(const SlowBackendScope&) = delete;

 private:
  SlowBackend backend_;
};

}  // namespace kt
