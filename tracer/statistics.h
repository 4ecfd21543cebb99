// Tracer statistics: what this thread's tracer did over its lifetime (graph breaks with
// their cost, recompiles, anchors left eager, ops recorded and replayed, replay time,
// evictions), and explain() built from them and the trace tree.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tracer/break_reason.h"
#include "tracer/config.h"
#include "tracer/report.h"
#include "tracer/user_site.h"

namespace kiln::tracer {

struct CompiledTrace;
struct TraceTree;

// The clock the tracer's times are measured with (steady, ns).
inline int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct TraceStatistics {
  struct BreakSite {
    BreakCause cause;
    UserSite site;
    int64_t count = 0;
    int64_t eager_ns = 0;
    int64_t eager_ops = 0;
  };

  std::vector<BreakSite> breaks;
  std::vector<RecompileReport> recompiles;  // the latest 1024 at most
  std::vector<std::string> eager_anchors;   // the latest 1024 at most
  int64_t ops_recorded = 0;
  int64_t ops_replayed = 0;
  int64_t replay_ns = 0;   // time in compiled-trace runs
  int64_t replay_ops = 0;  // ops those runs covered
  int64_t evicted_traces = 0;
  int64_t evicted_ops = 0;
  int64_t head_penalties = 0;          // false loop heads (HeadPenalty, lifecycle.h)
  int64_t unrolled_loops = 0;          // short loops between host reads unrolled (tracer.h)
  int64_t fresh_path_suspensions = 0;  // anchors' recording suspended (FreshPathPenalty)
  int64_t host_side_ops = 0;           // ops run outside traces as host-side (tracer.h)
  int64_t independent_reads = 0;       // host reads that needed no boundary
  int64_t stored_loaded = 0;           // traces loaded from the warm-start store (warm_start.h)
  int64_t stored_refused = 0;          // stored traces refused (another build, malformed)
  int64_t size_bindings = 0;           // symbolic traces bound to new sizes (symbolic_shapes.h)

  // Measured time of compiled-trace replays per op (ns); -1 before the first replay.
  double replay_ns_per_op() const {
    return replay_ops > 0 ? static_cast<double>(replay_ns) / static_cast<double>(replay_ops) : -1.0;
  }
  // A graph break (a Sync or Record reason) at site that cost this eager work; logged
  // the first time per reason and site.
  void note_break(const BreakCause& cause, const UserSite& site, int64_t eager_ns,
                  int64_t eager_ops);
  // A recompile (generation > 0) and its reason; logged.
  void note_recompile(const CompiledTrace& compiled);
  // An anchor left eager (the line says why); logged under `category`.
  void note_eager_anchor(std::string line, LogCategory category = kLogRecompiles);

  ExplainReport explain(const TraceTree& tree) const;
};

}  // namespace kiln::tracer
