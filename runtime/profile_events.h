// The profiler's event sink: what the dispatcher (ops/), the tracer and the JIT emit
// while a profile records on this thread. It lives in the runtime so that every layer
// can emit spans without depending on the layer that reads them; the reports made from
// the events (kiln::Profile's table, break costs and Chrome trace, which need the
// tracer's statistics) are in tracer/profiler.h.
//
//   profiler::Span span(profiler::Kind::Op, device, [&] { return name; });  // emit
//
// Events: every eager op (dispatcher execute / execute_into: user ops, recording, side
// exits and interpreted replays), every compiled-trace replay (trace id, backend, kernels),
// every fused LLVM kernel of a replay, every compile (trace id, ms), every graph break (reason,
// user file:line, function, the eager time of the trace segment it cut), and side-exit
// materializations. Host times come from steady_clock; CUDA ops and replays also get a GPU span
// from CUDA events on the device's stream. Sinks are per thread: work on other threads is not
// recorded. They may nest (the inner one records; the outer one resumes when it ends).
//
// Cost when no sink is active: one thread_local pointer test per op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace kiln::profiler {

// Kernel: a fused kernel of a compiled trace (the LLVM backend), inside its replay.
enum class Kind : uint8_t { Op, Replay, Compile, GraphBreak, Materialize, Kernel };
// "op", "replay", "compile", "graph_break", "materialize", "kernel"
const char* kind_name(Kind kind);

struct Event {
  Kind kind = Kind::Op;
  std::string name;  // the summary key: "relu", "replay trace 3", "compile trace 3", ...
  int64_t start_ns = 0, end_ns = -1;  // host clock, since the sink started
  std::string device;                 // "cpu", "cuda:0"
  // GPU span (CUDA work only; -1 when none), on the same time base as the host times.
  int64_t gpu_start_ns = -1, gpu_end_ns = -1;
  // Replays and compiles.
  int trace_id = 0;
  std::string backend;
  int kernels = 0;
  int ops = 0;  // ops in the trace (replay, compile) or in the segment a break cut
  // Graph breaks.
  std::string reason, file, function;
  int line = 0;
  int64_t eager_ns = 0;  // eager time of the trace segment the break cut

  double ms() const { return end_ns < start_ns ? 0.0 : (end_ns - start_ns) / 1e6; }
};

// Records the events of this thread from construction to stop() (kiln::Profile is one,
// with the reports on top).
class EventSink {
 public:
  EventSink();  // starts recording on this thread
  ~EventSink();
  EventSink(const EventSink&) = delete;
  EventSink& operator=(const EventSink&) = delete;

  void stop();  // idempotent; waits for the GPU spans of CUDA events
  bool running() const { return running_; }
  const std::vector<Event>& events() const { return events_; }
  int64_t elapsed_ns() const;  // from start to stop (or to now while running)
  double wall_ms() const { return elapsed_ns() / 1e6; }

  // Recording (used by the dispatcher and the tracer through Span).
  size_t begin(Kind kind, std::string name, const Device& device);
  void end(size_t index);
  Event& event(size_t index) { return events_[index]; }

 private:
  int64_t now() const;
  void resolve_gpu();

  struct GpuMarks {
    void* start = nullptr;
    void* end = nullptr;
    int device = 0;
  };
  EventSink* outer_;
  int64_t origin_ns_;  // steady_clock at start
  int64_t stop_ns_ = -1;
  bool running_ = true;
  std::vector<Event> events_;
  std::vector<GpuMarks> gpu_marks_;  // parallel to events_ (empty marks for CPU work)
  struct GpuRef {
    int device;
    void* event;
    int64_t host_ns;
  };
  std::vector<GpuRef> gpu_refs_;  // per device: an event the host time was taken at
};

// The sink recording on this thread, or nullptr.
extern constinit thread_local EventSink* tls_active;

// A span of the active sink (nothing when none): begin now, end at scope exit.
class Span {
 public:
  template <class NameFn>
  Span(Kind kind, const Device& device, NameFn&& name) : sink_(tls_active) {
    if (sink_ != nullptr) [[unlikely]]
      index_ = sink_->begin(kind, name(), device);
  }
  ~Span() {
    if (sink_ != nullptr) [[unlikely]]
      sink_->end(index_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // The event, to add details; nullptr when no sink records.
  Event* event() { return sink_ ? &sink_->event(index_) : nullptr; }

 private:
  EventSink* sink_;
  size_t index_ = 0;
};

}  // namespace kiln::profiler
