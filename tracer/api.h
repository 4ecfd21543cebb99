// The tracer's public API (C++; Python mirrors it in kiln/_tracer.py).
//
//   tracer::set_enabled(false)        stop automatic tracing of eager code (on by default,
//                                     KILN_TRACE=0); regions and compile() still trace
//   tracer::Region r({"step"});       a scoped region: its entry and exit are trace
//                                     boundaries; warmup and fullgraph apply inside
//   auto f = tracer::compile(fn, {.warmup = 3, .fullgraph = true});
//                                     fn wrapped in a region on every call
//   tracer::explain().table()         traces, graph breaks with their cost, recompiles
//   tracer::reset()                   forget every trace of this thread
//   tracer::wait_for_compiles()       let this thread's background compiles finish
//
// fullgraph=true turns the first graph break inside the region into a GraphBreakError
// naming the reason and the user's source location.
#pragma once

#include <exception>
#include <source_location>
#include <utility>

#include "runtime/error.h"
#include "tracer/tracer.h"
#include "tracer/report.h"

namespace kiln {

class GraphBreakError : public Error {
 public:
  using Error::Error;
};

namespace tracer {

void set_enabled(bool on);
bool enabled();
ExplainReport explain();
void reset();
// Waits for this thread's background compiles (KILN_COMPILE_SYNC=0, the default) and
// installs their plans; a trace being walked now gets its plan at its next walk. For
// tests and benchmarks that count compiles; a loop never needs it.
void wait_for_compiles();
// Runs pending lazy work now (no trace boundary).
void flush();
// A host read or memory export that the runtime's lazy::sync does not name (a Sync
// reason, e.g. BreakReason::MemoryExport with detail "__dlpack__()"): a trace boundary.
void sync(const BreakCause& cause, const SourceSite& site = {});

class Region {
 public:
  explicit Region(RegionOptions options = {},
                  std::source_location loc = std::source_location::current());
  ~Region() noexcept(false);  // the exit boundary replays, which may throw
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 private:
  int uncaught_;
};

// Wraps fn so that each call runs inside a Region with these options.
template <class F>
auto compile(F fn, RegionOptions options = {},
             std::source_location loc = std::source_location::current()) {
  return [fn = std::move(fn), options = std::move(options), loc](auto&&... args) {
    Region region(options, loc);
    return fn(std::forward<decltype(args)>(args)...);
  };
}

}  // namespace tracer
}  // namespace kiln
