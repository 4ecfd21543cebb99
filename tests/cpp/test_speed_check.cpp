// Never slower than eager (tracer/speed_check.h): a compiled trace whose replays measure
// slower than eager for its own ops leaves its anchor eager, with results still equal to
// eager and explain() and the logs saying so; a fused trace that beats eager stays
// compiled. The slow trace comes from a backend that sleeps before running the ops
// (slow_backend.h), so the verdict is deterministic.
#include <cstdio>

#include "slow_backend.h"
#include "tracer/speed_check.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;

constexpr int kTrialWalks = tr::kSpeedTrialReplays;

class SpeedCheck : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    tr::config().jit = true;
    tr::config().speed_check = true;
    log_ = std::tmpfile();
    tr::config().log_file = log_;
    tr::config().log_mask = tr::kLogPerf;
  }
  void TearDown() override {
    tr::config().log_file = stderr;
    std::fclose(log_);
    TracerTest::TearDown();
  }
  std::string logs() const {
    std::fflush(log_);
    std::rewind(log_);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, log_)) > 0;) out.append(buf, n);
    return out;
  }
  std::FILE* log_ = nullptr;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

Tensor small_chain(const Tensor& x) { return kiln::tanh(x * 2.0 + 1.0) * x - 0.5; }

TEST_F(SpeedCheck, ATraceSlowerThanEagerFallsBackToEager) {
  SlowBackendScope slow(std::chrono::milliseconds(3));
  Tensor x = random_tensor({64});
  const Host ref = read(eager([&] { return small_chain(x); }));
  const int walks = tr::config().warmup + kTrialWalks + 5;
  for (int i = 0; i < walks; ++i) {
    Tensor y = small_chain(x);
    (void)kiln::sum(y).item<double>();  // the boundary
    ASSERT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32))) << "walk " << i;
  }
  const tr::ExplainReport report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  const tr::TraceReport& t = report.traces[0];
  EXPECT_EQ(t.backend, "slow (test)");
  EXPECT_EQ(t.replays, kTrialWalks) << "no compiled replay after the verdict";
  EXPECT_TRUE(t.stays_eager);
  EXPECT_GE(t.replay_ms, 3.0);
  EXPECT_GE(t.eager_ms, 0.0);
  EXPECT_GT(t.replay_ms, tr::kSlowerThanEagerMargin * t.eager_ms);
  EXPECT_TRUE(contains(t.eager_reason, "replays took ")) << t.eager_reason;
  EXPECT_TRUE(contains(t.eager_reason, " eager; it stays eager")) << t.eager_reason;
  ASSERT_EQ(report.eager_anchors.size(), 1u);
  EXPECT_TRUE(contains(report.eager_anchors[0], "-- abort: replays took "));
  const std::string table = report.table(), json = report.json();
  EXPECT_TRUE(contains(table, "[stays eager]")) << table;
  EXPECT_TRUE(contains(table, "stays eager: replays took ")) << table;
  EXPECT_TRUE(contains(table, "speed: replay ")) << table;
  EXPECT_TRUE(contains(json, "\"stays_eager\": true")) << json;
  EXPECT_TRUE(contains(json, "\"eager_reason\": \"replays took ")) << json;
  EXPECT_FALSE(contains(json, "\"replay_median_ms\": null")) << json;
  EXPECT_EQ(count_of(logs(), "replays took "), 1u) << logs();

  // The anchor stays eager: later walks neither replay nor compile again.
  for (int i = 0; i < 4; ++i) {
    Tensor y = small_chain(x);
    (void)kiln::sum(y).item<double>();
    ASSERT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32)));
  }
  EXPECT_EQ(tr::explain().traces.at(0).replays, kTrialWalks);
  EXPECT_EQ(tr::explain().traces.size(), 1u);
}

TEST_F(SpeedCheck, AFusedPointwiseChainOnBigTensorsStaysCompiled) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM (CPU traces run through the interpreter: nothing fuses)";
#endif
  Tensor x = random_tensor({1 << 20});
  auto chain = [](const Tensor& v) {
    Tensor y = v;
    for (int i = 0; i < 6; ++i) y = kiln::relu(y * 1.01 + 0.01) - 0.02;
    return y;
  };
  const Host ref = read(eager([&] { return chain(x); }));
  const int warmup = tr::config().warmup;
  for (int i = 0; i < warmup + kTrialWalks + 4; ++i) {
    Tensor y = chain(x);
    (void)kiln::sum(y).item<double>();
    ASSERT_TRUE(all_close(y, ref, tol_pointwise(DType::Float32))) << "walk " << i;
    if (i == warmup) {  // the trial is running: nothing measured yet
      const tr::ExplainReport partial = tr::explain();
      ASSERT_EQ(partial.traces.size(), 1u);
      EXPECT_LT(partial.traces[0].replay_ms, 0.0);
      EXPECT_TRUE(contains(partial.json(), "\"replay_median_ms\": null"));
    }
  }
  const tr::ExplainReport report = tr::explain();
  ASSERT_EQ(report.traces.size(), 1u) << report.table();
  const tr::TraceReport& t = report.traces[0];
  EXPECT_FALSE(t.stays_eager) << report.table();
  EXPECT_TRUE(t.eager_reason.empty());
  EXPECT_EQ(t.replays, kTrialWalks + 4);
  EXPECT_LT(t.kernels, static_cast<int>(t.ops.size())) << "fused";
  // Measured, and within the margin (fused, it is usually several times faster than
  // eager; on a machine this loaded not always: the margin absorbs that).
  ASSERT_GT(t.replay_ms, 0.0);
  ASSERT_GT(t.eager_ms, 0.0);
  EXPECT_LE(t.replay_ms, tr::kSlowerThanEagerMargin * t.eager_ms) << report.table();
  EXPECT_TRUE(report.eager_anchors.empty());
  EXPECT_TRUE(contains(logs(), "eager (medians of ")) << logs();
  EXPECT_FALSE(contains(logs(), "replays took")) << logs();
}

}  // namespace
}  // namespace kt
