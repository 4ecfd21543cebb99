// Never slower than eager, with bindings (tracer/speed_check.h): a symbolic trace whose
// every replay binds its plan to new sizes (each a new plan) is judged by binding + run,
// so one that loses to eager that way stays eager, with explain() saying that bindings
// did it and values equal eager throughout; a trace bound to a few sizes once each stays
// compiled (the median leaves its few bound samples out). Bindings are slow on purpose
// (a backend that sleeps in every compile, slow_backend.h), so the verdicts are
// deterministic.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>

#include "slow_backend.h"
#include "tracer/speed_check.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;

constexpr int kTrialWalks = tr::kSpeedTrialReplays;

class SpeedCheckBindings : public LlvmJitTest {
 protected:
  void SetUp() override {
    LlvmJitTest::SetUp();
    tr::config().speed_check = true;
    tr::config().symbolic_shapes = true;
  }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The one symbolic trace of the report (nullptr when there is none or several).
const tr::TraceReport* symbolic_trace(const tr::ExplainReport& report) {
  const tr::TraceReport* found = nullptr;
  for (const tr::TraceReport& t : report.traces) {
    if (t.symbolic.empty()) continue;
    if (found) return nullptr;
    found = &t;
  }
  return found;
}

Tensor small_chain(const Tensor& x) { return kiln::tanh(x * 2.0 + 1.0) * x - 0.5; }

Host small_chain_reference(const Host& x) {
  return map(x, [](double v) { return std::tanh(v * 2.0 + 1.0) * v - 0.5; });
}

// One walk of small_chain at n elements, checked against the host reference.
void check_small_chain(int64_t n) {
  const Host h = random_host({n}, DType::Float32);
  const Tensor y = small_chain(make(h, DType::Float32));
  const Host out = read(y);  // the host read ends the walk
  ASSERT_EQ(out.sizes, Dims{n});
  EXPECT_TRUE(all_close(out, small_chain_reference(h), tol_pointwise(DType::Float32)));
}

TEST_F(SpeedCheckBindings, ATraceThatBindsAtEveryWalkAndLosesToEagerStaysEager) {
  tr::config().verify = true;  // compiled turns checked against eager too
  SlowBindingScope slow(std::chrono::milliseconds(5));
  // Every walk a new size: every replay binds the symbolic trace to it (5 ms and more),
  // where eager runs four ops on 100-odd floats.
  int64_t n = 64;
  const int walks = tr::config().warmup + kTrialWalks + 12;
  for (int i = 0; i < walks; ++i) {
    SCOPED_TRACE("walk " + std::to_string(i));
    ASSERT_NO_FATAL_FAILURE(check_small_chain(n++));
  }
  const tr::ExplainReport report = tr::explain();
  const tr::TraceReport* t = symbolic_trace(report);
  ASSERT_NE(t, nullptr) << report.table();
  EXPECT_TRUE(t->stays_eager) << report.table();
  EXPECT_EQ(t->replays, kTrialWalks) << "no compiled replay after the verdict";
  EXPECT_EQ(t->bound_samples, tr::kSpeedSamples) << report.table();
  EXPECT_GE(t->replay_ms, 5.0) << "each sample holds its binding";
  EXPECT_LT(t->run_ms, t->replay_ms);
  EXPECT_GT(t->replay_ms, tr::kSlowerThanEagerMargin * t->eager_ms);
  // Bindings: the unsampled replay's and the compiled turns' (eager turns make none).
  EXPECT_EQ(t->size_bindings, 1 + tr::kSpeedSamples) << report.table();
  const std::string why = "binding a plan to new sizes or bounds in " +
                          std::to_string(tr::kSpeedSamples) + " of " +
                          std::to_string(tr::kSpeedSamples) + " replays; runs alone ";
  EXPECT_TRUE(contains(t->eager_reason, "replays took ")) << t->eager_reason;
  EXPECT_TRUE(contains(t->eager_reason, why)) << t->eager_reason;
  EXPECT_TRUE(contains(t->eager_reason, " eager; it stays eager")) << t->eager_reason;
  ASSERT_EQ(report.eager_anchors.size(), 1u) << report.table();
  EXPECT_TRUE(contains(report.eager_anchors[0], why)) << report.eager_anchors[0];
  const std::string table = report.table(), json = report.json();
  EXPECT_TRUE(contains(table, "replay sample(s) bound a plan, runs alone ")) << table;
  EXPECT_TRUE(contains(table, "stays eager: replays took ")) << table;
  EXPECT_TRUE(contains(json, "\"speed_bound_samples\": " + std::to_string(tr::kSpeedSamples)))
      << json;

  // The anchor stays eager: later walks at new sizes neither replay nor bind.
  const int compiles = slow.compiles();
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(check_small_chain(n++));
  const tr::ExplainReport after = tr::explain();
  ASSERT_NE(symbolic_trace(after), nullptr);
  EXPECT_EQ(symbolic_trace(after)->replays, kTrialWalks);
  EXPECT_EQ(slow.compiles(), compiles);
}

TEST_F(SpeedCheckBindings, ATraceBoundToAFewSizesStaysCompiled) {
  // The same slow bindings, far slower than a run; but the walks take two sizes in turn,
  // so the trace binds once (to the size it was not compiled at) and then finds the
  // binding: the trial's median is the fused runs', which beat eager on big tensors.
  SlowBindingScope slow(std::chrono::milliseconds(20));
  auto chain = [](const Tensor& v) {
    Tensor y = v;
    for (int i = 0; i < 6; ++i) y = kiln::relu(y * 1.01 + 0.01) - 0.02;
    return y;
  };
  const Dims sizes[2] = {{1 << 20}, {(1 << 20) + 64}};
  const Tensor inputs[2] = {random_tensor(sizes[0]), random_tensor(sizes[1])};
  const Host refs[2] = {read(eager([&] { return chain(inputs[0]); })),
                        read(eager([&] { return chain(inputs[1]); }))};
  const int walks = tr::config().warmup + kTrialWalks + 12;
  for (int i = 0; i < walks; ++i) {
    Tensor y = chain(inputs[i % 2]);
    (void)kiln::sum(y).item<double>();  // the boundary
    ASSERT_TRUE(all_close(y, refs[i % 2], tol_pointwise(DType::Float32))) << "walk " << i;
  }
  const tr::ExplainReport report = tr::explain();
  const tr::TraceReport* t = symbolic_trace(report);
  ASSERT_NE(t, nullptr) << report.table();
  EXPECT_FALSE(t->stays_eager) << report.table();
  EXPECT_TRUE(t->eager_reason.empty());
  EXPECT_LE(t->size_bindings, 1) << report.table();
  EXPECT_LE(t->bound_samples, 1) << report.table();
  EXPECT_GE(t->replays, kTrialWalks);
  ASSERT_GT(t->replay_ms, 0.0) << report.table();
  ASSERT_GT(t->eager_ms, 0.0);
  EXPECT_LT(t->replay_ms, 20.0) << "no binding in the median";
  EXPECT_LE(t->replay_ms, tr::kSlowerThanEagerMargin * t->eager_ms) << report.table();
  EXPECT_TRUE(report.eager_anchors.empty()) << report.table();
}

}  // namespace
}  // namespace kt
