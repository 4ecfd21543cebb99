// For tests of the JIT's planning passes on programs recorded on the CPU (no compile):
// a backend that keeps the program of the first trace compiled while it is registered
// (and replays it interpreted), and a TracerTest that registers it first, with the JIT
// on and tracing off outside regions.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "tracer/backend.h"
#include "tracer_util.h"

namespace kt {

class CaptureBackend final : public kiln::tracer::TraceBackend {
 public:
  std::unique_ptr<kiln::tracer::Executable> compile(
      const kiln::tracer::TraceProgram& program) override {
    if (!captured) captured = std::make_unique<kiln::tracer::TraceProgram>(program);
    return kiln::tracer::interpreting_backend().compile(program);
  }
  std::unique_ptr<kiln::tracer::TraceProgram> captured;
};

class CapturingTest : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    kiln::tracer::config().jit = true;
    kiln::tracer::set_enabled(false);
    kiln::tracer::register_backend_first(&backend_);
  }
  void TearDown() override {
    kiln::tracer::unregister_backend(&backend_);
    TracerTest::TearDown();
  }
  // Runs f in regions until a trace of it is compiled (at most 4 times); whether one was.
  bool capture(const std::function<void()>& f) {
    for (int i = 0; i < 4 && !backend_.captured; ++i) {
      kiln::tracer::Region region;
      f();
    }
    return backend_.captured != nullptr;
  }
  CaptureBackend backend_;
};

}  // namespace kt
