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

// KILN_CUDA_STEP_PROFILE=segments: the CUDA graphs stay on, and each segment's launch
// (pipelined replay: a segment launches once the walk has passed it) is bracketed by
// events. At exit, per trace and segment: the GPU's time in it, the GPU's idle time
// before it (waiting for the host to launch it) and the host's time since the previous
// launch; runs are read back at the next run's first launch (the first 3 not counted).
bool segments_enabled();

class SegmentTimeline {
 public:
  SegmentTimeline(int device, size_t segments, std::string name);
  ~SegmentTimeline();
  SegmentTimeline(const SegmentTimeline&) = delete;
  SegmentTimeline& operator=(const SegmentTimeline&) = delete;
  void started();                     // a pipelined run began (the walk found the trace)
  void at_depth(size_t k, size_t d);  // segment k launched with the walk at depth d
  void before(size_t k);              // just before segment k's launch
  void after(size_t k);               // just after it

 private:
  struct Mark {
    void* from = nullptr;
    void* to = nullptr;
    double host_from = 0, host_to = 0;  // seconds, steady clock
    size_t depth = 0;                   // the walk's depth at the launch (0: at the end)
  };
  void fold();  // the finished run into the process-wide table
  void clear(std::vector<Mark>& marks);
  int device_;
  std::string name_;
  std::vector<Mark> run_, last_;  // this run's marks; the last segment of the previous one
  long runs_ = 0;
  double started_ = 0;  // this run's start, seconds (0: not pipelined)
};

}  // namespace kiln::jit::step_profile
