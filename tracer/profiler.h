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
// The recording (the events, what emits them, their clocks and cost) is the runtime's
// event sink, runtime/profile_events.h; a Profile is a sink plus the reports made from
// its events, which read the tracer's statistics (the measured replay time per op).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/profile_events.h"

namespace kiln::profiler {

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

class Profile : public EventSink {
 public:
  Profile() = default;  // starts recording on this thread

  // sort_by: "total", "self", "count", "avg" or "name"; row_limit < 0: every row.
  std::string table(const std::string& sort_by = "total", int row_limit = -1) const;
  std::vector<BreakCost> break_costs() const;
  // Measured replay time per op in this profile (ns); -1 when there was no replay.
  double replay_ns_per_op() const;
  std::string chrome_trace_json() const;                    // tracer/chrome_trace.cpp
  void export_chrome_trace(const std::string& path) const;  // throws on I/O errors
};

}  // namespace kiln::profiler

namespace kiln {
using profiler::Profile;
}
