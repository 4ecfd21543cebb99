// Never slower than eager: a compiled trace is measured against eager for its own ops.
// The eager side is the walks that ran the trace's path eagerly before it compiled (its
// recording walks: as many as its warmup, kept up to kSpeedSamples, the latest first);
// the compiled side is its replays, after kSpeedUnsampledReplays unsampled ones (cold code,
// first allocations), kSpeedSamples of them. Once those are in, the medians are compared:
// a compiled trace whose median exceeds kSlowerThanEagerMargin times the eager median
// makes its anchor stay eager (TraceState::SlowerThanEager, reason SlowerThanEager);
// explain() shows both medians for every judged trace, and KILN_LOGS=perf or trace prints
// one line for the verdict. The first recording walk ran the ops cold: it is left out
// when there are others (with a warmup of 1 it is the only sample, which leans toward
// keeping). Errors should lean toward keeping the compiled trace (the verdict is final; a
// wrong keep is the behaviour without the check): the margin absorbs noise.
//
// Measured: the host time of the trace's ops (eager: running them one by one, the time
// the walk spent in them; compiled: Executable::run), not the tracer's per-op bookkeeping,
// which both pay. Only traces that run wholly on the CPU are judged: on CUDA the host time
// of a launch is not the GPU's time.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::tracer {

struct Anchor;
struct TraceNode;
struct TraceProgram;
struct TraceStatistics;
struct Walk;

// The policy's constants (the one place they live).
inline constexpr int kSpeedSamples = 8;                // timings per side
inline constexpr int kSpeedUnsampledReplays = 1;       // compiled runs before sampling
inline constexpr double kSlowerThanEagerMargin = 1.1;  // replay median / eager median

// One compiled trace's measurement (kept on the TraceNode that holds it).
class SpeedTrial {
 public:
  // A walk that ran the path's ops eagerly took `ns` (before or after the compile).
  void note_eager(int64_t ns);
  // A replay of the compiled program took `ns`; true when this completed the trial.
  bool note_replay(const TraceProgram& program, int64_t ns);
  // Whether the trial is complete (both medians known).
  bool done() const { return done_; }
  // Medians in ns once done(), else -1.
  double replay_median_ns() const { return done_ ? replay_median_ : -1; }
  double eager_median_ns() const { return done_ ? eager_median_ : -1; }
  bool slower_than_eager() const {
    return done_ && replay_median_ > kSlowerThanEagerMargin * eager_median_;
  }

 private:
  bool done_ = false;
  bool skipped_ = false;  // not judged (not a CPU trace, or no eager sample)
  int replays_ = 0;
  std::vector<int64_t> replay_ns_, eager_ns_;
  double replay_median_ = -1, eager_median_ = -1;
};

// After a walk ended at node's compiled trace: once the trial is complete, judges it (the
// anchor stays eager when the trace is slower than eager) and reports the verdict.
void judge_speed(Anchor& anchor, const TraceNode& node, TraceStatistics& statistics);

}  // namespace kiln::tracer
