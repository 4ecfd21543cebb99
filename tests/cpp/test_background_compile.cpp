// Background compiles (tracer/background_compile.h): a hot trace compiles on the compile
// thread while the loop runs eagerly, its plan swaps in at a later walk, results equal
// eager before, during and after the swap; a compile that throws leaves the trace eager,
// reported in explain() and the logs, the loop still right; reset, eviction and process
// exit with a compile in flight are clean. The compile's length comes from a backend that
// sleeps (slow_backend.h), so "in flight" is deterministic; the LLVM JIT is checked too.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "slow_backend.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;
using Clock = std::chrono::steady_clock;

class BackgroundCompile : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    tr::config().background_compile = true;
  }
};

int in_flight() { return tr::Tracer::current().compiles_in_flight(); }

// The tracer's log lines written to `log` (a tmpfile set as config().log_file), read back;
// the log goes to stderr and off again and the file is closed.
std::string close_log(std::FILE* log) {
  std::fflush(log);
  std::rewind(log);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, log)) > 0;) text.append(buf, n);
  tr::config().log_file = stderr;
  tr::config().log_mask = 0;
  std::fclose(log);
  return text;
}

Tensor body(const Tensor& x, const Tensor& w) {
  Tensor y = kiln::tanh(x * w + 1.0);
  for (int i = 0; i < 6; ++i) y = kiln::sigmoid(y * 1.5 - x) * w;
  return y;
}

// The same in a region: one trace, ended at the region's exit (no loop closes inside).
Tensor region_body(const Tensor& x, const Tensor& w) {
  tr::Region region({"body"});
  return body(x, w);
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A loop ended by item() every iteration: eager while the trace compiles (300 ms), the
// plan from the walk after it is ready; every iteration equals eager.
TEST_F(BackgroundCompile, LoopStaysRightWhileCompilingAndAfterTheSwap) {
  DelayedCompileScope delayed(std::chrono::milliseconds(300));
  Tensor x = random_tensor({257}), w = random_tensor({257});
  const Host ref = read(eager([&] { return body(x, w); }));
  const double ref_sum = eager([&] { return kiln::sum(body(x, w)).item<double>(); });
  int submitted_at = -1, swapped_at = -1, replays_after = 0;
  int64_t nodes_when_hot = -1;
  double slowest_ms = 0;
  const auto start = Clock::now();
  for (int i = 0; ms_since(start) < 20000 && replays_after < 5; ++i) {
    const auto t = Clock::now();
    Tensor y = body(x, w);
    const double s = kiln::sum(y).item<double>();  // the boundary
    slowest_ms = std::max(slowest_ms, ms_since(t));
    ASSERT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32))) << "iteration " << i;
    ASSERT_NEAR(s, ref_sum, 1e-4 * std::abs(ref_sum) + 1e-4) << "iteration " << i;
    if (submitted_at < 0 && in_flight() == 1) {
      submitted_at = i;
      nodes_when_hot = tr::Tracer::current().cached_ops();
    }
    if (submitted_at >= 0 && swapped_at < 0) {
      // No second compile or recording of new nodes while the first one runs.
      EXPECT_EQ(tr::Tracer::current().cached_ops(), nodes_when_hot) << "iteration " << i;
      EXPECT_LE(delayed.compiles(), 1);
    }
    if (swapped_at < 0 && count_traces() == 1) swapped_at = i;
    if (swapped_at >= 0 && tr::explain().traces[0].replays > 0) ++replays_after;
  }
  ASSERT_EQ(submitted_at, tr::config().warmup - 1) << "compiled when hot";
  ASSERT_GT(swapped_at, submitted_at + 3) << "the loop ran on while the trace compiled";
  EXPECT_EQ(replays_after, 5);
  EXPECT_LT(slowest_ms, 150.0) << "an iteration waited for the 300 ms compile";
  const tr::ExplainReport report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  EXPECT_EQ(report.traces[0].backend, "interpreter");
  EXPECT_GE(report.traces[0].compile_ms, 300.0);
  EXPECT_TRUE(report.recompiles.empty()) << report.table();
  EXPECT_EQ(delayed.compiles(), 1);
}

// The same with no host read: the loop closes at its anchor, and the plan swaps in when
// the anchor comes round after the compile is done.
TEST_F(BackgroundCompile, ALoopWithoutHostReadsSwapsInAtItsAnchor) {
  DelayedCompileScope delayed(std::chrono::milliseconds(100));
  Tensor x = random_tensor({64}), w = random_tensor({64});
  const Host ref = read(eager([&] { return body(x, w); }));
  std::vector<Tensor> kept;
  const auto start = Clock::now();
  int i = 0;
  for (; ms_since(start) < 20000; ++i) {
    kept.push_back(body(x, w));
    if (count_traces() == 1 && tr::explain().traces[0].replays >= 3) break;
  }
  kiln::tracer::flush();
  for (size_t k = 0; k < kept.size(); ++k)
    ASSERT_TRUE(all_close(kept[k], ref, tol_pointwise(DType::Float32))) << "iteration " << k;
  EXPECT_GT(i, 10);
  EXPECT_EQ(delayed.compiles(), 1);
  EXPECT_TRUE(tr::explain().recompiles.empty());
}

// The LLVM JIT on the compile thread: a trace of 300 ops; wait_for_compiles() makes the
// next walk replay deterministically.
TEST_F(BackgroundCompile, LlvmPlanFromTheCompileThreadEqualsEager) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#endif
  tr::config().jit = true;
  Tensor x = random_tensor({33, 65}), w = random_tensor({65});
  auto long_body = [&] {
    tr::Region region({"long"});
    Tensor y = x;
    for (int i = 0; i < 60; ++i) y = kiln::tanh(y * w + 0.25) - x * 0.5;
    return y;
  };
  const Host ref = read(eager(long_body));
  for (int i = 0; i < 6; ++i) {
    Tensor y = long_body();
    // 60 chained tanh: fused code's (vector math) and eager's rounding compound.
    ASSERT_TRUE(all_close(y, ref, Tol{1e-4, 1e-5})) << "iteration " << i;
    if (i == 1) tr::wait_for_compiles();  // (with the disk cache warm it may be done)
  }
  const tr::ExplainReport report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  EXPECT_EQ(report.traces[0].backend, "llvm");
  EXPECT_EQ(report.traces[0].ops.size(), 300u);
  EXPECT_EQ(report.traces[0].replays, 4);
}

// CUDA traces compile in the background too (NVRTC, the CUBIN load through the
// context-free library API, cuBLASLt with the device set): the log says "in the
// background", results equal eager CPU's before and after the swap, and the plan replays
// as a CUDA graph captured on the user's thread at its first replay.
TEST_F(BackgroundCompile, CudaTracesCompileInTheBackgroundAndEqualEager) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  tr::config().jit = true;
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  tr::config().log_file = log;
  tr::config().log_mask = tr::parse_log_categories("trace");
  const Tensor xc = random_tensor({33, 65}), wc = random_tensor({65});
  const Tensor x = xc.cuda(), w = wc.cuda();
  auto long_body = [](const Tensor& a, const Tensor& b) {
    tr::Region region({"long"});
    Tensor y = a;
    for (int i = 0; i < 40; ++i) y = kiln::tanh(y * b + 0.25) - a * 0.5;
    return y;
  };
  const Host ref = read(eager([&] { return long_body(xc, wc); }));
  for (int i = 0; i < 8; ++i) {
    Tensor y = long_body(x, w);
    EXPECT_TRUE(y.is_cuda());
    ASSERT_TRUE(all_close(y, ref, Tol{1e-4, 1e-5})) << "iteration " << i;  // 40 chained tanh
    if (i == 1) tr::wait_for_compiles();
  }
  const std::string text = close_log(log);
  EXPECT_NE(text.find("(nvrtc, "), std::string::npos) << text;
  EXPECT_NE(text.find(", in the background) at "), std::string::npos) << text;
  const tr::ExplainReport report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  const tr::TraceReport& t = report.traces[0];
  EXPECT_EQ(t.backend, "nvrtc") << report.table();
  EXPECT_EQ(t.replays, 6) << report.table();
  bool graph = false, graph_off = false;
  for (const std::string& n : t.notes) {
    graph |= n.find("cuda graph") != std::string::npos;
    graph_off |= n.find("cuda graph off") != std::string::npos;
  }
  EXPECT_TRUE(graph && !graph_off) << report.table();
}

// A compile that throws on the compile thread: the trace stays eager, the failure shows
// in explain() and the logs, the loop stays right, nothing compiles it again.
TEST_F(BackgroundCompile, AFailedCompileIsReportedAndTheLoopStaysRight) {
  std::FILE* log = std::tmpfile();
  tr::config().log_file = log;
  tr::config().log_mask = tr::parse_log_categories("recompiles,trace");
  {
    DelayedCompileScope failing(std::chrono::milliseconds(50), /*fail=*/true);
    Tensor x = random_tensor({40}), w = random_tensor({40});
    const Host ref = read(eager([&] { return body(x, w); }));
    for (int i = 0; i < 30; ++i) {
      Tensor y = body(x, w);
      (void)kiln::sum(y).item<double>();
      ASSERT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32))) << "iteration " << i;
      if (i == 5) tr::wait_for_compiles();
    }
    EXPECT_EQ(failing.compiles(), 1);
  }
  const tr::ExplainReport report = tr::explain();
  EXPECT_TRUE(report.traces.empty()) << report.table();
  ASSERT_EQ(report.eager_anchors.size(), 1u) << report.table();
  const std::string message =
      "-- abort: its compile failed ([test] the delayed backend's compile failed); it stays eager";
  EXPECT_NE(report.eager_anchors[0].find(message), std::string::npos) << report.eager_anchors[0];
  EXPECT_NE(report.table().find(message), std::string::npos) << report.table();
  const std::string text = close_log(log);
  EXPECT_NE(text.find("[kiln] trace at "), std::string::npos) << text;
  EXPECT_NE(text.find(message), std::string::npos) << text;
}

// The same failure in synchronous mode reads the same (it no longer escapes to the user).
TEST_F(BackgroundCompile, ASynchronousFailureReadsTheSame) {
  tr::config().background_compile = false;
  DelayedCompileScope failing(std::chrono::milliseconds(1), /*fail=*/true);
  Tensor x = random_tensor({40}), w = random_tensor({40});
  const Host ref = read(eager([&] { return body(x, w); }));
  for (int i = 0; i < 5; ++i) {
    Tensor y = body(x, w);
    (void)kiln::sum(y).item<double>();
    ASSERT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32))) << "iteration " << i;
  }
  const tr::ExplainReport report = tr::explain();
  ASSERT_EQ(report.eager_anchors.size(), 1u) << report.table();
  EXPECT_NE(report.eager_anchors[0].find("its compile failed ([test]"), std::string::npos);
  EXPECT_EQ(failing.compiles(), 1);
}

// reset() and eviction drop a compile in flight: its result is never installed, the
// tracer goes on, a later loop compiles and replays.
TEST_F(BackgroundCompile, ResetAndEvictionDropACompileInFlight) {
  Tensor x = random_tensor({30}), w = random_tensor({30});
  const Host ref = read(eager([&] { return body(x, w); }));
  {
    DelayedCompileScope delayed(std::chrono::milliseconds(200));
    for (int i = 0; i < 2; ++i) (void)kiln::sum(body(x, w)).item<double>();
    ASSERT_EQ(in_flight(), 1);
    tr::reset();
    EXPECT_EQ(in_flight(), 0);
    // Eviction: a cap of one compiled trace and few ops; other traces push it out.
    tr::config().trace_cache_ops = 64;
    for (int i = 0; i < 2; ++i) (void)kiln::sum(body(x, w)).item<double>();
    ASSERT_EQ(in_flight(), 1);
    for (int n = 1; n < 12; ++n) {
      Tensor v = random_tensor({n + 40});
      for (int i = 0; i < 2; ++i) (void)kiln::sum(kiln::exp(v) * 2.0 - v * v + 1.0).item<double>();
    }
    tr::wait_for_compiles();
    const tr::ExplainReport report = tr::explain();
    EXPECT_GT(report.evicted_ops, 0);
    for (const tr::TraceReport& t : report.traces)  // the evicted compile never came in
      EXPECT_EQ(std::count(t.ops.begin(), t.ops.end(), "sigmoid"), 0) << report.table();
  }
  tr::config().trace_cache_ops = saved_.trace_cache_ops;
  tr::reset();
  for (int i = 0; i < 6; ++i) {
    Tensor y = region_body(x, w);
    ASSERT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32))) << "iteration " << i;
    if (i == 1) tr::wait_for_compiles();
  }
  ASSERT_EQ(count_traces(), 1u);
  EXPECT_EQ(tr::explain().traces[0].replays, 4);
}

// Process exit (std::exit from main's thread) with compiles in flight: a clean exit, code
// 0 (under LSan a leak would make it nonzero). The delayed compile is surely running at
// exit and a second one queued; then an LLVM compile of a long trace.
// Never unregistered (exit comes first); a volatile global keeps it reachable for LSan (a
// function-local static pointer that is never read was optimized away: a reported leak).
DelayedCompileScope* volatile delayed_at_exit = nullptr;

[[noreturn]] void exit_with_delayed_compiles_in_flight() {
  tr::config().background_compile = true;
  delayed_at_exit = new DelayedCompileScope(std::chrono::milliseconds(300));
  Tensor x = random_tensor({50});
  Tensor w = random_tensor({50});
  Tensor v = random_tensor({70});
  for (int i = 0; i < 2; ++i) (void)kiln::sum(body(x, w)).item<double>();
  for (int i = 0; i < 2; ++i) (void)kiln::sum(kiln::exp(v) * 2.0 - v).item<double>();
  std::fprintf(stderr, "in flight: %d\n", in_flight());
  std::exit(0);
}

[[noreturn, maybe_unused]] void exit_with_an_llvm_compile_in_flight() {
  tr::config().background_compile = true;
  tr::config().jit = true;
  Tensor v = random_tensor({70});
  for (int k = 0; k < 2; ++k) {
    Tensor y = v;
    for (int i = 0; i < 80; ++i) y = kiln::tanh(y * 1.5 + 0.5) - v;
    (void)kiln::sum(y).item<double>();
  }
  std::fprintf(stderr, "submitted\n");
  std::exit(0);
}

TEST_F(BackgroundCompile, ProcessExitWithACompileInFlightIsClean) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(exit_with_delayed_compiles_in_flight(), ::testing::ExitedWithCode(0), "in flight: 2");
#ifdef KILN_WITH_LLVM
  EXPECT_EXIT(exit_with_an_llvm_compile_in_flight(), ::testing::ExitedWithCode(0), "submitted");
#endif
}

}  // namespace
}  // namespace kt
