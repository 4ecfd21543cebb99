// tracer/break_reasons.def is the only source of reasons: every row is raised by a real
// program here (a switch over BreakReason, so a new row without a case fails to compile)
// and shows up where users read it (explain(), the logs) with its message, its row name
// and its phase; rows are well formed; a reason raised in the wrong phase is refused.
// tests/python/test_break_reasons.py checks the sources: every row is raised somewhere
// and no reason is raised as free text.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/cuda_context.h"
#include "slow_backend.h"
#include "tracer/break_reason.h"
#include "tracer/speed_check.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;
using tr::BreakCause;
using tr::BreakPhase;
using tr::BreakReason;

// Captures every log category into a temporary file for one scope.
class LogCapture {
 public:
  LogCapture() : file_(std::tmpfile()) {
    tr::config().log_file = file_;
    tr::config().log_mask = tr::parse_log_categories("all");
  }
  ~LogCapture() {
    tr::config().log_file = stderr;
    tr::config().log_mask = 0;
    std::fclose(file_);
  }
  std::string text() const {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, file_)) > 0;) out.append(buf, n);
    return out;
  }

 private:
  std::FILE* file_;
};

Tensor chain(const Tensor& x) { return kiln::tanh(x * 2.0 + 1.0) * x; }

void hot(const std::function<Tensor()>& f, int times = 3) {
  for (int i = 0; i < times; ++i) (void)kiln::sum(f()).item<double>();
}

const tr::BreakReport* break_of(const tr::ExplainReport& report, BreakReason reason) {
  for (const auto& b : report.breaks)
    if (b.kind == tr::break_reason_name(reason)) return &b;
  return nullptr;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs a program that raises `reason`; returns where its message shows (the explain
// table and JSON plus the logs), or "" when this machine can't raise it (no GPU).
std::string raise(BreakReason reason) {
  LogCapture logs;
  Tensor x = random_tensor({6});
  switch (reason) {
    case BreakReason::HostRead:
      (void)kiln::sum(kiln::exp(x) * 2.0).item<double>();
      break;
    case BreakReason::MemoryExport: {  // as the bindings' __dlpack__() does
      Tensor y = kiln::exp(x) * 2.0;
      tr::sync(BreakCause{BreakReason::MemoryExport, "__dlpack__()"});
      break;
    }
    case BreakReason::CopyToHost: {
      if (!kiln::cuda_context::is_available()) return "";
      Tensor y = kiln::exp(x.cuda()) * 2.0;
      (void)y.cpu();
      break;
    }
    case BreakReason::DataDependentShape:
      (void)kiln::nonzero(kiln::exp(x) * 2.0 - 2.0);
      break;
    case BreakReason::TraceTooLong: {
      tr::config().max_trace_length = 4;
      Tensor y = x;
      for (int i = 0; i < 10; ++i) y = y * 1.01;
      (void)kiln::sum(y).item<double>();
      break;
    }
    case BreakReason::UserException:
      try {
        tr::Region region({"throws"});
        Tensor y = kiln::exp(x) * 2.0;
        throw std::runtime_error("user code failed");
      } catch (const std::runtime_error&) {
      }
      break;
    case BreakReason::GuardFailed:
      hot([&] { return chain(x); });
      hot([&] { return chain(random_tensor({9})); });
      break;
    case BreakReason::Diverged:
      hot([&] { return kiln::sin(kiln::exp(x) * 2.0); });
      hot([&] { return kiln::cos(kiln::exp(x) * 2.0); });
      break;
    case BreakReason::PendingRead:
      hot([&] { return chain(x); });
      {
        Tensor y = chain(x);
        (void)y.data_ptr();  // read while the replay is pending: a side exit
        (void)kiln::sum(y).item<double>();
      }
      break;
    case BreakReason::NewVariant:
      hot([&] { return kiln::exp(x) * 2.0 + 1.0; });
      for (int i = 0; i < 3; ++i) {
        Tensor y = kiln::exp(x) * 2.0 + 1.0;  // ends before the compiled trace's end
        (void)y.to_vector<double>();
      }
      break;
    case BreakReason::SingleOp:
      for (int i = 0; i < 3; ++i) (void)kiln::sum(x).item<double>();
      break;
    case BreakReason::RecompileLimit:
      tr::config().recompile_limit = 2;
      tr::config().symbolic_shapes = false;  // each size a variant (symbolic_shapes.h)
      for (int n = 1; n <= 6; ++n) hot([&] { return chain(random_tensor({n})); }, 2);
      break;
    case BreakReason::SlowerThanEager: {
      SlowBackendScope slow;  // replays sleep: slower than eager
      tr::config().jit = true;
      tr::config().speed_check = true;
      hot([&] { return chain(x); }, 2 + tr::kSpeedTrialReplays);
      break;
    }
    case BreakReason::CompileFailed: {
      DelayedCompileScope failing(std::chrono::milliseconds(1), /*fail=*/true);
      hot([&] { return chain(x); });
      break;
    }
  }
  const tr::ExplainReport report = tr::explain();
  return report.table() + "\n" + report.json() + "\n" + logs.text();
}

// What the program above must show for each reason.
std::vector<std::string> expected_text(BreakReason reason) {
  switch (reason) {
    case BreakReason::HostRead:
      return {"item() reads a value on the host"};
    case BreakReason::MemoryExport:
      return {"__dlpack__() hands a tensor's memory to another library"};
    case BreakReason::CopyToHost:
      return {"a copy to the host (.cpu() / .to(\"cpu\")) copies a tensor to the host"};
    case BreakReason::DataDependentShape:
      return {"nonzero's output shape depends on its input's values (a host read)"};
    case BreakReason::TraceTooLong:
      return {"the trace reached the maximum length of 4 ops"};
    case BreakReason::UserException:
      return {"an exception left the traced region"};
    case BreakReason::GuardFailed:
      return {"side exit after op 0 -- guard failed: input in0 (argument 0 of mul): shape",
              "-- guard failed: input in0"};
    case BreakReason::Diverged:
      return {"-- the op stream diverged from the hot trace at op 3: expected sin, got cos",
              "-- guard failed: the op stream diverged from the hot trace at op 3"};
    case BreakReason::PendingRead:
      return {"-- a tensor's memory was read while the trace was pending"};
    case BreakReason::NewVariant:
      return {"-- guard failed: a new variant of the trace"};
    case BreakReason::SingleOp:
      return {"is one op (sum): it stays eager"};
    case BreakReason::RecompileLimit:
      return {"-- abort: recompiled 3 times (limit 2; KILN_RECOMPILE_LIMIT); it stays eager",
              "[stays eager]"};
    case BreakReason::SlowerThanEager:
      return {"-- abort: replays took ", " eager; it stays eager (medians of 8", "[stays eager]",
              "\"eager_reason\": \"replays took "};
    case BreakReason::CompileFailed:
      return {
          "-- abort: its compile failed ([test] the delayed backend's compile failed); it "
          "stays eager"};
  }
  return {};
}

class BreakReasons : public TracerTest {};

TEST_F(BreakReasons, EveryRowIsRaisedAndReadsAsItsMessage) {
  for (int i = 0; i < tr::kBreakReasonCount; ++i) {
    const auto reason = static_cast<BreakReason>(i);
    SCOPED_TRACE(tr::break_reason_name(reason));
    tr::reset();
    const tr::TracerConfig saved = tr::config();
    const std::string shown = raise(reason);
    tr::config() = saved;
    if (shown.empty()) continue;  // needs a GPU
    for (const std::string& part : expected_text(reason))
      EXPECT_TRUE(contains(shown, part)) << "missing: " << part << "\n" << shown;
    const BreakPhase phase = tr::break_reason_phase(reason);
    if (phase == BreakPhase::Sync || phase == BreakPhase::Record) {  // a graph break
      const auto report = tr::explain();                             // held: b points into it
      const tr::BreakReport* b = break_of(report, reason);
      ASSERT_NE(b, nullptr) << shown;
      EXPECT_EQ(b->phase, tr::break_phase_name(phase));
      EXPECT_TRUE(contains(shown, "\"kind\": \"" + std::string(tr::break_reason_name(reason))));
    }
  }
}

TEST(BreakReasonTable, RowsAreWellFormed) {
  for (int i = 0; i < tr::kBreakReasonCount; ++i) {
    const auto reason = static_cast<BreakReason>(i);
    const std::string text = tr::break_reason_text(reason);
    SCOPED_TRACE(tr::break_reason_name(reason));
    EXPECT_FALSE(std::string(tr::break_reason_name(reason)).empty());
    const size_t at = text.find("{}");
    EXPECT_EQ(text.find("{}", at == std::string::npos ? 0 : at + 2), std::string::npos)
        << "at most one {} per message";
    const BreakCause cause{reason, at == std::string::npos ? "" : "DETAIL"};
    const std::string message = cause.message();
    EXPECT_FALSE(contains(message, "{}"));
    EXPECT_EQ(contains(message, "DETAIL"), at != std::string::npos);
    EXPECT_NO_THROW(tr::check_break_cause(cause, tr::break_reason_phase(reason)));
    // A detail where the row has none (or none where it wants one) is refused.
    const BreakCause wrong{reason, at == std::string::npos ? "DETAIL" : ""};
    EXPECT_THROW(tr::check_break_cause(wrong, tr::break_reason_phase(reason)), kiln::Error);
  }
  const BreakCause read{BreakReason::HostRead, "item()"};
  EXPECT_EQ(read.message(), "item() reads a value on the host");
  EXPECT_THROW(tr::check_break_cause(read, BreakPhase::Replay), kiln::Error);
  EXPECT_THROW(tr::sync(BreakCause{BreakReason::GuardFailed, "x"}), kiln::Error);
}

}  // namespace
}  // namespace kt
