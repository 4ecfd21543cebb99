// Per-step GPU time of compiled CUDA traces, for finding what to speed up (a diagnostic,
// not a benchmark). KILN_CUDA_STEP_PROFILE=1 turns the traces' CUDA graphs off and
// brackets every step (a fused kernel or a library call) with CUDA events; each run's
// events are read after the run, and at exit a table of the steps by label (the op
// names and the shape), sorted by total time, goes to stderr.
#pragma once

#include <string>
#include <vector>

#include "jit/fusion.h"

namespace kiln::jit::step_profile {

bool enabled();  // KILN_CUDA_STEP_PROFILE=1, read once

// Step s's name in the table: its op names and shape ("matmul [96, 256, 256] <...>",
// "fused mul,where,softmax [16, 6, 256, 256] rows"); `folded`: a GEMM with its epilogue.
std::string label(const tracer::TraceProgram& program, const FusionPlan& plan, size_t s,
                  bool folded);

// One run's events: mark() before and after each step, then finish() once the run is
// launched (waits for the events and adds their times to the process-wide table).
class Run {
 public:
  explicit Run(int device) : device_(device) {}
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  void begin();                        // before a step
  void end(const std::string& label);  // after it
  void finish();

 private:
  int device_;
  void* start_ = nullptr;
  struct Span {
    void* from;
    void* to;
    std::string label;
  };
  std::vector<Span> spans_;
};

}  // namespace kiln::jit::step_profile
