#include "tracer/api.h"

namespace kiln::tracer {

void set_enabled(bool on) { Tracer::current().set_enabled(on); }
bool enabled() { return Tracer::current().enabled(); }
ExplainReport explain() { return Tracer::current().explain(); }
void reset() { Tracer::current().reset(); }
void wait_for_compiles() { Tracer::current().wait_for_compiles(); }
void flush() { Tracer::current().flush(); }
void sync(const BreakCause& cause, const SourceSite& site) {
  Tracer::current().on_sync(cause, site);
}

Region::Region(RegionOptions options, std::source_location loc)
    : uncaught_(std::uncaught_exceptions()) {
  Tracer::current().region_enter(options, capture_site(SourceSite::from(loc)));
}

Region::~Region() noexcept(false) {
  // An exception leaving the region aborts its trace (pending work still runs).
  const bool by_exception = std::uncaught_exceptions() > uncaught_;
  try {
    Tracer::current().region_exit(by_exception);
  } catch (...) {
    if (!by_exception) throw;
  }
}

}  // namespace kiln::tracer
