// The seam between tensors and the tracer. While a hot trace replays, ops return lazy
// tensors: a TensorImpl with metadata but no storage yet, whose value the plan computes
// at the next trace boundary. Reading any tensor's memory while lazy work is pending
// (data_ptr(), storage(), a sync point such as item()) first runs that work, so a
// reader never sees a stale or missing value.
#pragma once

#include <cstdint>
#include <source_location>

namespace kiln {

struct TensorImpl;

// Where user code stands: a C++ std::source_location, or a Python frame (the bindings
// provide one through set_python_site_provider in tracer/).
struct SourceSite {
  const char* file = "";
  int line = 0;
  const char* function = "";
  int column = 0;
  static SourceSite from(const std::source_location& loc) {
    return SourceSite{loc.file_name(), static_cast<int>(loc.line()), loc.function_name(),
                      static_cast<int>(loc.column())};
  }
};

// Marker base for the tracer's per-value record attached to a lazy TensorImpl.
struct PendingValue {
  virtual ~PendingValue() = default;
  // Why the traced computation that owed this value failed (an out-of-memory error in a
  // replay, ...), or null: a failed value never comes, and reading it is an error.
  virtual const char* failure() const { return nullptr; }
};

namespace lazy {

// True while this thread has lazy work that has not run yet.
extern constinit thread_local bool tls_pending;

// Why a host read ends a trace: a value the user reads (item(), printing), or an op
// whose output shape depends on its input's values (nonzero, masked_select), which the
// tracer reports as its own break reason.
enum class SyncKind : uint8_t { HostRead, DataDependentShape };

// Installed by the tracer. flush runs the pending work; sync additionally reports a
// trace boundary caused by reading a value on the host. `what` names the read ("item()",
// "numpy()") or the op ("nonzero"): the detail of the tracer's HostRead or
// DataDependentShape break reason (tracer/break_reasons.def), never a reason of its own.
// `read` is the tensor read, when known: sync returns true when its value does not depend
// on pending work (the trace goes on; read it inside a PendingPause), false when the read
// was a boundary.
using FlushFn = void (*)();
using SyncFn = bool (*)(SyncKind kind, const char* what, const SourceSite& site,
                        const TensorImpl* read);
void set_hooks(FlushFn flush, SyncFn sync);

void flush();  // runs pending lazy work (no-op when none)
// Called at every host read with what reads ("item()") and the user's location; a trace
// boundary unless `read`'s value is independent of the pending work (returns true then).
bool sync(const char* what, const SourceSite& site, const TensorImpl* read = nullptr);
// An op whose output shape depends on its input's values (nonzero): always a boundary.
void sync(const char* what, const SourceSite& site, SyncKind kind);

// While alive (and `active`), memory accesses do not run pending work: for reading a
// value sync() found independent of it, and for the tracer's host-side ops on such values.
class PendingPause {
 public:
  explicit PendingPause(bool active) : active_(active), saved_(tls_pending) {
    if (active_) tls_pending = false;
  }
  ~PendingPause() {
    if (active_) tls_pending = saved_ || tls_pending;
  }
  PendingPause(const PendingPause&) = delete;
  PendingPause& operator=(const PendingPause&) = delete;

 private:
  bool active_;
  bool saved_;
};

// Throws Error: `what` (e.g. "[add] argument 1") has no value to read, because the traced
// computation that owed it failed (pending->failure(), when known).
[[noreturn]] void throw_unavailable(const char* what, const PendingValue* pending);

}  // namespace lazy
}  // namespace kiln
