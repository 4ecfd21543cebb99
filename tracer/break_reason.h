// Break reasons (the role of LuaJIT's lj_traceerr.h): tracer/break_reasons.def is the
// only list of reasons. A BreakCause is one occurrence: the row plus its detail ("item()",
// the guard that failed, ...). Raising a reason always names a row; its message is the
// row's text with the detail in place of "{}".
#pragma once

#include <cstdint>
#include <string>

namespace kiln::tracer {

enum class BreakReason : uint8_t {
#define KILN_BREAK(id, phase, text) id,
#include "tracer/break_reasons.def"
#undef KILN_BREAK
};

// The rows, in order: BreakReason values are 0 .. kBreakReasonCount - 1.
inline constexpr int kBreakReasonCount = 0
#define KILN_BREAK(id, phase, text) +1
#include "tracer/break_reasons.def"
#undef KILN_BREAK
    ;

// Where in the tracer a reason arises (the .def's phase column).
enum class BreakPhase : uint8_t { Sync, Record, Replay, Lifecycle };

const char* break_reason_name(BreakReason reason);  // "HostRead"
BreakPhase break_reason_phase(BreakReason reason);
const char* break_reason_text(BreakReason reason);  // the row's message, "{}" unfilled
const char* break_phase_name(BreakPhase phase);     // "sync"

// One occurrence of a reason.
struct BreakCause {
  BreakReason reason = BreakReason::HostRead;
  std::string detail;  // fills the row's "{}"; empty for a row without one

  BreakPhase phase() const { return break_reason_phase(reason); }
  // The row's message with the detail in place: "item() reads a value on the host".
  std::string message() const;
  bool operator==(const BreakCause& o) const { return reason == o.reason && detail == o.detail; }
};

// Throws Error (an internal error of the tracer) unless cause's row is of `phase` and
// carries a detail exactly when its message has a "{}".
void check_break_cause(const BreakCause& cause, BreakPhase phase);

}  // namespace kiln::tracer
