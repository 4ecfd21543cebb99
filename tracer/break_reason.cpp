#include "tracer/break_reason.h"

#include <string_view>

#include "runtime/error.h"

namespace kiln::tracer {
namespace {

struct Row {
  const char* name;
  BreakPhase phase;
  const char* text;
};

constexpr Row kRows[] = {
#define KILN_BREAK(id, phase, text) {#id, BreakPhase::phase, text},
#include "tracer/break_reasons.def"
#undef KILN_BREAK
};
static_assert(sizeof(kRows) / sizeof(kRows[0]) == kBreakReasonCount);

const Row& row(BreakReason reason) { return kRows[static_cast<int>(reason)]; }

}  // namespace

const char* break_reason_name(BreakReason reason) { return row(reason).name; }
BreakPhase break_reason_phase(BreakReason reason) { return row(reason).phase; }
const char* break_reason_text(BreakReason reason) { return row(reason).text; }

const char* break_phase_name(BreakPhase phase) {
  switch (phase) {
    case BreakPhase::Sync:
      return "sync";
    case BreakPhase::Record:
      return "record";
    case BreakPhase::Replay:
      return "replay";
    case BreakPhase::Lifecycle:
      return "lifecycle";
  }
  return "?";
}

std::string BreakCause::message() const {
  const std::string_view text = break_reason_text(reason);
  const size_t at = text.find("{}");
  if (at == std::string_view::npos) return std::string(text);
  std::string out(text.substr(0, at));
  out += detail;
  out += text.substr(at + 2);
  return out;
}

void check_break_cause(const BreakCause& cause, BreakPhase phase) {
  const bool wants_detail =
      std::string_view(break_reason_text(cause.reason)).find("{}") != std::string_view::npos;
  KILN_CHECK(cause.phase() == phase && wants_detail == !cause.detail.empty(), Error,
             "[trace] internal error: break reason ", break_reason_name(cause.reason), " (phase ",
             break_phase_name(cause.phase()), ", detail '", cause.detail, "') raised as a ",
             break_phase_name(phase), " reason");
}

}  // namespace kiln::tracer
