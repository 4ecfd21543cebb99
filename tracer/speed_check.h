// Never slower than eager: a compiled CPU trace is measured against eager for its own ops
// over its first replays. After kSpeedUnsampledReplays unsampled replays (cold code, first
// allocations), its replays alternate: one runs the compiled executable, the next runs the
// same ops one by one with the eager kernels (tracer::interpret), each timed, until
// kSpeedSamples of each are in. Interleaving puts both sides under the same load and the
// same caches, so a busy machine slows both alike. Then the medians are compared: a
// compiled trace whose median exceeds kSlowerThanEagerMargin times the eager median makes
// its anchor stay eager (TraceState::SlowerThanEager, reason SlowerThanEager); explain()
// shows both medians for every judged trace, and KILN_LOGS=perf or trace prints one line
// for the verdict. The verdict is final, so errors lean toward keeping the compiled trace
// (a wrong keep is the behaviour without the check): the margin absorbs noise.
//
// A symbolic trace (symbolic_shapes.h) binds its plan to a walk's sizes and bounds when no
// binding has them yet: a plan built on the spot, part of what that replay costs. So a
// compiled turn's sample is its binding, when it made one, plus its run; an eager turn
// makes none (it runs the walk's own program with the eager kernels). A trace that binds
// on most replays (a KV cache written at a new position every step) is then judged by
// binding + run against eager; one that binds rarely (a few batch sizes, each bound once)
// by its runs, as the median leaves a few bound samples out. explain() says how many
// samples bound and what the runs alone took.
//
// Both sides compute the same values (the eager turn is what eager runs), so no result
// depends on a timing; only whether later walks replay does. Not judged: traces not wholly
// on the CPU (the host time of a launch is not the GPU's time), traces the interpreter runs
// (its replays are the eager side), and every trace while config().speed_check is off
// (KILN_SPEED_CHECK=0: the test suites pin it off so that replay counts never depend on the
// machine's load; the speed check's own tests turn it on).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::tracer {

struct Anchor;
struct CompiledTrace;
struct TraceNode;
struct TraceStatistics;

// The policy's constants (the one place they live).
inline constexpr int kSpeedSamples = 8;                 // timings per side
inline constexpr int kSpeedUnsampledReplays = 1;        // compiled runs before sampling
inline constexpr double kSlowerThanEagerMargin = 1.25;  // replay median / eager median
// Replays a judged trace takes to reach its verdict.
inline constexpr int kSpeedTrialReplays = kSpeedUnsampledReplays + 2 * kSpeedSamples;

// One compiled trace's measurement (kept on the TraceNode that holds it).
class SpeedTrial {
 public:
  // Whether this replay of `compiled` is the trial's eager turn: the caller runs the
  // program with the eager kernels (tracer::interpret) instead of its executable. The
  // first call decides whether the trace is judged at all.
  bool eager_turn(const CompiledTrace& compiled);
  // This replay took `ns` (`eager`: it was the eager turn), after `binding_ns` spent
  // binding a symbolic trace to new sizes or bounds (0: no binding); a compiled sample is
  // both together. True when this completed the trial.
  bool note_replay(bool eager, int64_t ns, int64_t binding_ns = 0);
  // Whether the trial is complete (both medians known).
  bool done() const { return done_; }
  // Medians in ns once done(), else -1.
  double replay_median_ns() const { return done_ ? replay_median_ : -1; }
  double eager_median_ns() const { return done_ ? eager_median_ : -1; }
  // The compiled samples' runs alone (bindings left out), and how many samples bound.
  double run_median_ns() const { return done_ ? run_median_ : -1; }
  int bound_samples() const { return bound_samples_; }
  bool slower_than_eager() const {
    return done_ && replay_median_ > kSlowerThanEagerMargin * eager_median_;
  }

 private:
  bool done_ = false;
  bool skipped_ = false;  // not judged (see the top of this file)
  int replays_ = 0;
  int bound_samples_ = 0;
  std::vector<int64_t> replay_ns_, eager_ns_, run_ns_;
  double replay_median_ = -1, eager_median_ = -1, run_median_ = -1;
};

// After a walk ended at node's compiled trace: once the trial is complete, judges it (the
// anchor stays eager when the trace is slower than eager) and reports the verdict.
void judge_speed(Anchor& anchor, const TraceNode& node, TraceStatistics& statistics);

}  // namespace kiln::tracer
