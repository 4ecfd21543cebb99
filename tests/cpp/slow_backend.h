// Backends slow on purpose, for the speed check's and background compile's tests (their
// verdicts then deterministic): SlowBackend runs the trace through the eager kernels
// (results equal eager) after sleeping `delay`; SlowBindingBackend sleeps in every compile
// (a symbolic trace's bindings); DelayedCompileBackend sleeps in compile or fails. While
// their scope lives, each is tried before every other backend.
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

// A backend whose every compile sleeps `delay` first and then hands the program to the
// backends after it (the LLVM JIT: a fused executable, judged by the speed check), so a
// symbolic trace's binding to new sizes or bounds costs at least `delay`. While a
// SlowBindingScope lives, it is tried before every other backend.
class SlowBindingBackend final : public kiln::tracer::TraceBackend {
 public:
  explicit SlowBindingBackend(std::chrono::microseconds delay) : delay_(delay) {}
  std::unique_ptr<kiln::tracer::Executable> compile(
      const kiln::tracer::TraceProgram& program) override {
    thread_local bool nested = false;
    if (nested) return nullptr;  // compile_trace below: the next backend takes it
    std::this_thread::sleep_for(delay_);
    ++compiles;
    nested = true;
    std::unique_ptr<kiln::tracer::Executable> executable;
    try {
      executable = kiln::tracer::compile_trace(program);
    } catch (...) {
      nested = false;
      throw;
    }
    nested = false;
    return executable;
  }
  std::atomic<int> compiles{0};

 private:
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

class SlowBindingScope {
 public:
  explicit SlowBindingScope(std::chrono::microseconds delay) : backend_(delay) {
    kiln::tracer::wait_for_running_compile();  // the backend list changes under no compile
    kiln::tracer::register_backend_first(&backend_);
  }
  ~SlowBindingScope() {
    kiln::tracer::wait_for_compiles();
    kiln::tracer::wait_for_running_compile();
    kiln::tracer::unregister_backend(&backend_);
  }
  SlowBindingScope(const SlowBindingScope&) = delete;
  SlowBindingScope& operator=(const SlowBindingScope&) = delete;
  int compiles() const { return backend_.compiles; }

 private:
  SlowBindingBackend backend_;
};

}  // namespace kt
