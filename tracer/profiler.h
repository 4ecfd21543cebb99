// The profiler: a scoped kiln::Profile records what kiln did on this thread while it is
// alive, like torch.profiler:
//
//   kiln::Profile prof;                   // starts recording on this thread
//   for (...) step();
//   prof.stop();                          // or let it go out of scope
//   std::cout << prof.table("total");     // per key: count, total, self, avg, % of wall
//   prof.export_chrome_trace("t.json");   // opens in Perfetto / chrome://tracing
//   for (auto& b : prof.break_costs()) ...
//
// Events: every eager op (dispatcher execute / execute_into: user ops, recording, side
// exits and interpreted replays), every compiled-trace replay (trace id, backend, kernels),
// every fused LLVM kernel of a replay, every compile (trace id, ms), every graph break (reason,
// user file:line, function, the eager time of the trace segment it cut), and side-exit
// materializations. Host times come from steady_clock; CUDA ops and replays also get a GPU span
// from CUDA events on the device's stream. Profiles are per thread: work on other threads is not
// recorded. They may nest (the inner one records; the outer one resumes when it ends).
//
// Cost when no profile is active: one thread_local pointer test per op.
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
  int64_t start_ns = 0, end_ns = -1;  // host clock, since the profile started
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

// What a graph-break site cost during the profile (sorted most costly first).
//   eager_ms: time spent running ops eagerly in the trace segments this break cut (the
//     segment ran op by op because it ended at the break: recorded, or materialized).
//   est_saving_ms: an ESTIMATE of what compiling through the break would save:
//     eager_ms - eager_ops x (measured replay time per op), at least 0. The replay time
//     per op is the total time of compiled-trace replays in this profile divided by the
//     ops they covered (else the tracer's lifetime measure on this thread); it counts the
//     plan's run only, not the per-op dispatch of a lazy walk. -1 when no replay has been
//     measured yet (no basis for an estimate).
struct BreakCost {
  std::string reason, file, function;
  int line = 0;
  int64_t count = 0;
  int64_t eager_ops = 0;
  double eager_ms = 0;
  double est_saving_ms = -1;
  std::string site() const;  // "file:line (function)"
};

class Profile {
 public:
  Profile();  // starts recording on this thread
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  void stop();  // idempotent; waits for the GPU spans of CUDA events
  bool running() const { return running_; }
  const std::vector<Event>& events() const { return events_; }
  double wall_ms() const;  // from start to stop (or to now while running)

  // sort_by: "total", "self", "count", "avg" or "name"; row_limit < 0: every row.
  std::string table(const std::string& sort_by = "total", int row_limit = -1) const;
  std::vector<BreakCost> break_costs() const;
  // Measured replay time per op in this profile (ns); -1 when there was no replay.
  double replay_ns_per_op() const;
  std::string chrome_trace_json() const;
  void export_chrome_trace(const std::string& path) const;  // throws on I/O errors

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
  Profile* outer_;
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

// The profile recording on this thread, or nullptr.
extern constinit thread_local Profile* tls_active;

// A span of the active profile (nothing when none): begin now, end at scope exit.
class Span {
 public:
  template <class NameFn>
  Span(Kind kind, const Device& device, NameFn&& name) : profile_(tls_active) {
    if (profile_ != nullptr) [[unlikely]]
      index_ = profile_->begin(kind, name(), device);
  }
  ~Span() {
    if (profile_ != nullptr) [[unlikely]]
      profile_->end(index_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // The event, to add details; nullptr when no profile records.
  Event* event() { return profile_ ? &profile_->event(index_) : nullptr; }

 private:
  Profile* profile_;
  size_t index_ = 0;
};

}  // namespace kiln::profiler

namespace kiln {
using profiler::Profile;
}
