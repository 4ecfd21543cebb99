#include "tracer/speed_check.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"
#include "tracer/compiled_trace.h"
#include "tracer/config.h"
#include "tracer/statistics.h"
#include "tracer/trace_tree.h"

namespace kiln::tracer {
namespace {

double median(std::vector<int64_t> samples) {
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid),
                   samples.end());
  const double upper = static_cast<double>(samples[mid]);
  if (samples.size() % 2) return upper;
  const double lower = static_cast<double>(
      *std::max_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid)));
  return (lower + upper) / 2;
}

std::string ms(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", ns / 1e6);
  return buf;
}

}  // namespace

bool SpeedTrial::eager_turn(const CompiledTrace& compiled) {
  if (done_ || skipped_) return false;
  if (replays_ == 0) {
    skipped_ = !config().speed_check ||
               std::strcmp(compiled.executable->backend_name(), "interpreter") == 0;
    for (const TraceOp& op : compiled.program.ops) skipped_ = skipped_ || !op.meta.device.is_cpu();
    if (skipped_) return false;
  }
  // After the unsampled replays: compiled, eager, compiled, eager, ...
  return replays_ >= kSpeedUnsampledReplays && (replays_ - kSpeedUnsampledReplays) % 2 == 1;
}

bool SpeedTrial::note_replay(bool eager, int64_t ns, int64_t binding_ns) {
  if (done_ || skipped_) return false;
  if (replays_++ < kSpeedUnsampledReplays) return false;
  if (eager) {
    eager_ns_.push_back(ns);
  } else {
    replay_ns_.push_back(binding_ns + ns);
    run_ns_.push_back(ns);
    bound_samples_ += binding_ns > 0;
  }
  if (static_cast<int>(replay_ns_.size()) < kSpeedSamples ||
      static_cast<int>(eager_ns_.size()) < kSpeedSamples)
    return false;
  replay_median_ = median(replay_ns_);
  eager_median_ = median(eager_ns_);
  run_median_ = median(run_ns_);
  done_ = true;
  replay_ns_ = {};
  eager_ns_ = {};
  run_ns_ = {};
  return true;
}

void judge_speed(Anchor& anchor, const TraceNode& node, TraceStatistics& statistics) {
  const SpeedTrial& trial = node.speed;
  const CompiledTrace& compiled = *node.compiled;
  TraceLifecycle& lifecycle = anchor.lifecycle;
  const std::string replay = ms(trial.replay_median_ns()), eager = ms(trial.eager_median_ns());
  // Where samples bound a plan to new sizes or bounds: how many, and the runs alone.
  const std::string binding =
      trial.bound_samples() == 0
          ? std::string()
          : detail::cat(" (binding a plan to new sizes or bounds in ", trial.bound_samples(),
                        " of ", kSpeedSamples, " replays; runs alone ", ms(trial.run_median_ns()),
                        ")");
  if (!trial.slower_than_eager() || lifecycle.state() != TraceState::Compiled) {
    if (logging(kLogPerf)) {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.2fx",
                    trial.eager_median_ns() / std::max(1.0, trial.replay_median_ns()));
      log_line(kLogPerf, detail::cat("trace ", compiled.id, " replays in ", replay, binding, " vs ",
                                     eager, " eager (medians of ", kSpeedSamples, "): ", ratio,
                                     " at ", lifecycle.site().str()));
    }
    return;
  }
  const BreakCause cause{BreakReason::SlowerThanEager, detail::cat(replay, binding, " vs ", eager)};
  check_break_cause(cause, BreakPhase::Lifecycle);
  lifecycle.on_slower_than_eager(cause);
  statistics.note_eager_anchor(
      detail::cat("trace ", compiled.id, " at ", lifecycle.site().str(),
                  " -- abort: ", cause.message(), " (medians of ", kSpeedSamples,
                  " walks each, margin ", kSlowerThanEagerMargin, "x)"),
      static_cast<LogCategory>(kLogPerf | kLogTrace));
}

}  // namespace kiln::tracer
