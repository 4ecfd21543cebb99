// Warm starts: compiled traces survive the process. Each trace compiled on the CPU is
// saved (persist.h: its anchor's stable key, its ops, wiring and guards) to the trace
// store under KILN_CACHE_DIR; a later process that creates an anchor with the same key
// puts the stored paths back under it and compiles them at once (the kernels come from
// the kernel cache: no LLVM compile, no recording iterations), so its first walk there
// replays.
//
// Where a stored trace is found:
// - when a walk begins at a new anchor (the first op after a boundary, or a loop head);
// - mid-walk, the first time a recording walk meets an op at a site where a stored trace
//   is anchored (the loop's first op after setup code that has no boundary before it):
//   the walk ends there (as at a loop head) and the next begins at that anchor.
// Safety is the same as for any compiled path: a replay follows the stored trace op by
// op, each op matched by op, attributes, wiring and the guards of its inputs; a program
// that changed (another op, another shape) leaves the path there (a side exit) and
// records, never replays a stale trace. Files are checked by the store (checksums,
// ownership) and by decode_stored_trace (format version, build); a refused one is logged
// once and the trace records and compiles as in a cold process.
//
// On unless KILN_WARM_START=0 (config().warm_start) or KILN_CACHE_DIR=off. CUDA traces are
// not stored (they record and compile as before; their kernels' CUBIN is in the kernel
// cache already).
#pragma once

#include <unordered_map>

#include "tracer/trace_tree.h"

namespace kiln::tracer {

struct TraceStatistics;

class WarmStart {
 public:
  // Whether warm starts are on and a store is registered.
  static bool on();
  // A new anchor: its stored traces, if any, installed (compiled now) under it.
  void load(TraceTree& tree, Anchor& anchor, TraceStatistics& statistics);
  // Whether a recording walk should end before this op and begin a walk at it: the first
  // time per site (since the last reset) that an op comes at a site with a stored trace.
  bool is_stored_head(SiteId site);
  // Saves a trace just compiled under `anchor` (not one loaded from the store).
  static void save(const Anchor& anchor, const CompiledTrace& compiled);
  void reset() { head_sites_.clear(); }

 private:
  std::unordered_map<SiteId, bool> head_sites_;  // per site: a stored head not yet split at
};

}  // namespace kiln::tracer
