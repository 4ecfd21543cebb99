// Helpers for the tracer suites: a fixture that starts each test with a fresh tracer,
// eager reference runs (tracing off), and lookups into explain().
#pragma once

#include <functional>
#include <string>

#include "ops/dispatch.h"
#include "reference.h"
#include "tracer/api.h"
#include "tracer/config.h"

namespace kt {

class TracerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = kiln::tracer::config();
    kiln::tracer::reset();
    kiln::tracer::set_enabled(true);
    kiln::tracer::config().warmup = 2;
    kiln::tracer::config().verify = false;
    kiln::tracer::config().speed_check = false;  // replay counts never depend on load
    kiln::tracer::config().warm_start = false;   // nor on traces an earlier run stored
    // Compiles on the spot, so that the iteration after warmup replays (counts of
    // compiles and replays are exact); tests/cpp/test_background_compile.cpp turns it on.
    kiln::tracer::config().background_compile = false;
  }
  void TearDown() override {
    kiln::tracer::reset();
    kiln::tracer::config() = saved_;
    kiln::tracer::set_enabled(saved_.auto_trace);
  }
  kiln::tracer::TracerConfig saved_;
};

// Compiles on the spot while it lives (KILN_COMPILE_SYNC=1's setting), for tests outside
// TracerTest that count compiles and replays after a fixed number of steps.
class SyncCompilesScope {
 public:
  SyncCompilesScope() : saved_(kiln::tracer::config().background_compile) {
    kiln::tracer::config().background_compile = false;
  }
  ~SyncCompilesScope() { kiln::tracer::config().background_compile = saved_; }
  SyncCompilesScope(const SyncCompilesScope&) = delete;
  SyncCompilesScope& operator=(const SyncCompilesScope&) = delete;

 private:
  bool saved_;
};

// A TracerTest with the LLVM JIT on; skipped in builds without LLVM.
class LlvmJitTest : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
#ifndef KILN_WITH_LLVM
    GTEST_SKIP() << "built without LLVM";
#endif
    kiln::tracer::config().jit = true;
  }
};

// Runs f untraced: kiln's eager result, the reference for traced runs. It does not end
// the current trace (the dispatcher simply bypasses the tracer for these calls).
template <class F>
auto eager(F&& f) {
  kiln::NoHookScope untraced;
  return f();
}

inline Tensor random_tensor(const Dims& sizes, DType d = DType::Float32) {
  return make(random_host(sizes, d), d);
}

inline size_t count_traces() { return kiln::tracer::explain().traces.size(); }

inline const kiln::tracer::BreakReport* find_break(const std::string& reason_part, int line) {
  static kiln::tracer::ExplainReport report;
  report = kiln::tracer::explain();
  for (const auto& b : report.breaks)
    if (b.reason.find(reason_part) != std::string::npos && (line <= 0 || b.line == line)) return &b;
  return nullptr;
}

}  // namespace kt
