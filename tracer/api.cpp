#include "tracer/api.h"

namespace kiln::tracer {

void set_enabled(bool on) { TraceRecorder::current().set_enabled(on); }
bool enabled() { return TraceRecorder::current().enabled(); }
ExplainReport explain() { return TraceRecorder::current().explain(); }
void reset() { TraceRecorder::current().reset(); }
void flush() { TraceRecorder::current().flush(); }

Region::Region(RegionOptions options, std::source_location loc)
    : uncaught_(std::uncaught_exceptions()) {
  TraceRecorder::current().region_enter(options, current_site(SourceSite::from(loc)));
}

Region::~Region() noexcept(false) {
  // An exception leaving the region aborts its trace (pending work still runs).
  const bool by_exception = std::uncaught_exceptions() > uncaught_;
  try {
    TraceRecorder::current().region_exit(by_exception);
  } catch (...) {
    if (!by_exception) throw;
  }
}

}  // namespace kiln::tracer
