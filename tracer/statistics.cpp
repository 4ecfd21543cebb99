#include "tracer/statistics.h"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/error.h"
#include "tracer/config.h"
#include "tracer/trace_tree.h"

namespace kiln::tracer {
namespace {

// A report, not a log: keeps the latest entries.
template <class T>
void keep_latest(std::vector<T>& entries) {
  if (entries.size() >= 1024) entries.erase(entries.begin(), entries.begin() + 512);
}

// What recompile reports print after "guard failed: ": the guard's own words for a
// failed guard, else the whole reason.
std::string recompile_text(const BreakCause& cause) {
  return cause.reason == BreakReason::GuardFailed ? cause.detail : cause.message();
}

}  // namespace

void TraceStatistics::note_break(const BreakCause& cause, const UserSite& site, int64_t eager_ns,
                                 int64_t eager_ops) {
  KILN_CHECK(cause.phase() == BreakPhase::Sync || cause.phase() == BreakPhase::Record, Error,
             "[trace] internal error: ", break_reason_name(cause.reason), " is not a graph break");
  for (BreakSite& b : breaks) {
    if (b.cause == cause && b.site == site) {
      ++b.count;
      b.eager_ns += eager_ns;
      b.eager_ops += eager_ops;
      return;
    }
  }
  breaks.push_back(BreakSite{cause, site, 1, eager_ns, eager_ops});
  log_line(kLogGraphBreaks, detail::cat("graph break at ", site.str(), ": ", cause.message()));
}

void TraceStatistics::note_recompile(const CompiledTrace& compiled) {
  const std::string reason = recompile_text(*compiled.recompile_cause);
  keep_latest(recompiles);
  recompiles.push_back(
      RecompileReport{compiled.id, compiled.generation, compiled.site.str(), reason});
  log_line(kLogRecompiles, detail::cat("trace ", compiled.id, "/", compiled.generation,
                                       " recompiled: ", compiled.program.ops.size(), " ops -> ",
                                       compiled.executable->kernel_count(), " kernels at ",
                                       compiled.site.str(), " -- guard failed: ", reason));
}

void TraceStatistics::note_eager_anchor(std::string line, LogCategory category) {
  keep_latest(eager_anchors);
  log_line(category, line);
  eager_anchors.push_back(std::move(line));
}

ExplainReport TraceStatistics::explain(const TraceTree& tree) const {
  ExplainReport r;
  // Traces starting at different sites of one line are told apart by column and helper.
  std::map<std::string, std::set<std::string>> exact_by_line;
  for (const auto& [anchor, node] : tree.compiled)
    exact_by_line[node->compiled->site.str()].insert(node->compiled->site.str_exact());
  for (const auto& [anchor, node] : tree.compiled) {
    const CompiledTrace& compiled = *node->compiled;
    TraceReport t;
    t.id = compiled.id;
    t.generation = compiled.generation;
    t.site = exact_by_line[compiled.site.str()].size() > 1 ? compiled.site.str_exact()
                                                           : compiled.site.str();
    t.site_key = compiled.site.stable_key();
    for (const TraceOp& op : compiled.program.ops) t.ops.push_back(op_name(op.op));
    for (const TensorGuard& g : compiled.guards) t.guards.push_back(g.str());
    t.kernels = compiled.executable->kernel_count();
    t.arena_bytes = compiled.executable->arena_bytes();
    t.backend = compiled.executable->backend_name();
    t.notes = compiled.executable->notes();
    if (compiled.symbolic()) {
      t.symbolic = compiled.symbolic_why;
      t.size_bindings = compiled.bindings->made();
      t.binding_ms = compiled.bindings->ms();
    }
    t.replays = node->replays;
    t.side_exits = node->side_exits;
    t.compile_ms = compiled.compile_ms;
    t.stays_eager = anchor->lifecycle.stays_eager();
    if (const auto& cause = anchor->lifecycle.eager_cause()) t.eager_reason = cause->message();
    t.replay_ms = node->speed.replay_median_ns() / 1e6;
    t.eager_ms = node->speed.eager_median_ns() / 1e6;
    t.bound_samples = node->speed.bound_samples();
    t.run_ms = node->speed.run_median_ns() / 1e6;
    r.compile_ms += compiled.compile_ms;
    r.traces.push_back(std::move(t));
  }
  for (const BreakSite& b : breaks) {
    BreakReport br;
    br.reason = b.cause.message();
    br.kind = break_reason_name(b.cause.reason);
    br.phase = break_phase_name(b.cause.phase());
    br.site = b.site.str();
    br.file = b.site.file;
    br.line = b.site.line;
    br.function = b.site.function;
    br.count = b.count;
    br.eager_ms = b.eager_ns / 1e6;
    br.eager_ops = b.eager_ops;
    br.est_saving_ms = estimate_saving_ms(br.eager_ms, b.eager_ops, replay_ns_per_op());
    r.breaks.push_back(std::move(br));
  }
  std::stable_sort(
      r.breaks.begin(), r.breaks.end(),
      [](const BreakReport& a, const BreakReport& b) { return a.eager_ms > b.eager_ms; });
  r.recompiles = recompiles;
  r.eager_anchors = eager_anchors;
  r.ops_recorded = ops_recorded;
  r.ops_replayed = ops_replayed;
  r.evicted_traces = evicted_traces;
  r.evicted_ops = evicted_ops;
  r.head_penalties = head_penalties;
  r.unrolled_loops = unrolled_loops;
  r.fresh_path_suspensions = fresh_path_suspensions;
  r.host_side_ops = host_side_ops;
  r.independent_reads = independent_reads;
  r.stored_loaded = stored_loaded;
  r.stored_refused = stored_refused;
  r.replay_ns_per_op = replay_ns_per_op();
  return r;
}

}  // namespace kiln::tracer
