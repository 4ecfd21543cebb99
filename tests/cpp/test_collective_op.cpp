// all_reduce as an op the tracer records (ops/distributed/collective_ops.h). A simulated
// group of two ranks (TwinGroup: the other rank holds this rank's values plus one, so a
// SUM gives 2x + 1) counts its backend calls: a traced loop with an all_reduce compiles,
// replays and gives the values of a double-precision reference computed here, with the
// backend called exactly once per all_reduce the program makes (never dropped, never run
// twice, even when the result looks unused). Also: the write is outside autograd (as
// torch.distributed's), a trace whose group was destroyed raises ValueError and leaves the
// tracer usable, KILN_VERIFY replays agree. Two real processes (the signature check's
// ValueError, DDP's GPT) are tests/python/test_distributed.py; NCCL inside a CUDA graph is
// test_distributed.py's test_nccl_traced_step_is_captured_in_a_cuda_graph (GPU only).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "ops/api.h"
#include "ops/distributed/collective_ops.h"
#include "reference.h"
#include "run_modes.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Tensor;
namespace dist = kiln::distributed;
namespace tr = kiln::tracer;

namespace {

class TwinGroup final : public dist::ProcessGroup {
 public:
  TwinGroup() : ProcessGroup(0, 2) {}
  std::string backend() const override { return "twin"; }
  int calls = 0;

 protected:
  bool checks_signatures() const override { return false; }
  void do_all_reduce(void* data, int64_t count, DType dtype, dist::ReduceOp op, Device) override {
    ASSERT_EQ(dtype, DType::Float32);
    ++calls;
    float* x = static_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) {
      const float other = x[i] + 1.0f;
      x[i] = op == dist::ReduceOp::Avg ? (x[i] + other) / 2 : x[i] + other;
    }
  }
  void do_broadcast(void*, int64_t, DType, int, Device) override {}
  void do_all_gather(const void*, void*, int64_t, DType, Device) override {}
  void do_reduce_scatter(const void*, void*, int64_t, DType, dist::ReduceOp, Device) override {}
  void do_barrier() override {}
};

std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

void expect_near(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << what << " element " << i;
}

int64_t total_replays() {
  int64_t n = 0;
  for (const auto& t : tr::explain().traces) n += t.replays;
  return n;
}

// One step: a gradient-like value made in the trace, all-reduced (SUM), and an in-place
// update of the parameter w with it; the loss read on the host ends the step.
double step(dist::ProcessGroup& group, Tensor& w, const Tensor& x) {
  Tensor g = x * w;
  group.all_reduce(g);
  w.copy_(w - g * 0.1);
  return kiln::sum(w).item().to_double();
}

class CollectiveOp : public ::testing::TestWithParam<RunMode> {};

TEST_P(CollectiveOp, ATracedLoopWithAllReduceReplaysAndMatchesTheReference) {
#ifndef KILN_WITH_LLVM
  if (GetParam() == RunMode::Jit) GTEST_SKIP() << "built without LLVM";
#endif
  RunModeScope mode(GetParam());
  tr::config().background_compile = false;
  TwinGroup group;
  const int steps = 8;
  Tensor w = random_tensor({5, 3});
  std::vector<double> ref_w = host(w);
  for (int s = 0; s < steps; ++s) {
    const Tensor x = random_tensor({5, 3});
    const std::vector<double> hx = host(x);
    const double loss = step(group, w, x);
    double ref_loss = 0;
    for (size_t i = 0; i < ref_w.size(); ++i) {
      const double g = hx[i] * ref_w[i];
      ref_w[i] -= 0.1 * (2 * g + 1);  // the twin's SUM: g + (g + 1)
      ref_loss += ref_w[i];
    }
    EXPECT_NEAR(loss, ref_loss, 1e-4 * (1 + std::abs(ref_loss))) << "step " << s;
    expect_near(host(w), ref_w, "w");
  }
  EXPECT_EQ(group.calls, steps) << "one backend call per all_reduce the program made";
  if (GetParam() == RunMode::Eager) return;
  EXPECT_GT(total_replays(), 0) << tr::explain().table();
  EXPECT_EQ(find_break("all_reduce", 0), nullptr) << tr::explain().table();
  EXPECT_TRUE(tr::explain().recompiles.empty()) << tr::explain().table();
}

TEST_P(CollectiveOp, AnAllReduceWhoseResultIsNeverReadStillRunsOncePerCall) {
#ifndef KILN_WITH_LLVM
  if (GetParam() == RunMode::Jit) GTEST_SKIP() << "built without LLVM";
#endif
  RunModeScope mode(GetParam());
  tr::config().background_compile = false;
  TwinGroup group;
  const int steps = 7;
  for (int s = 0; s < steps; ++s) {
    const Tensor x = random_tensor({4});
    {
      Tensor t = x * 2.0;
      group.all_reduce(t, dist::ReduceOp::Avg);  // t dies unread: DCE must keep the call
    }
    const double y = kiln::sum(x + 1.0).item().to_double();
    double ref = 0;
    for (double v : host(x)) ref += v + 1;
    EXPECT_NEAR(y, ref, 1e-4 * (1 + std::abs(ref)));
  }
  EXPECT_EQ(group.calls, steps);
  if (GetParam() != RunMode::Eager) {
    EXPECT_GT(total_replays(), 0) << tr::explain().table();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CollectiveOp,
                         ::testing::Values(RunMode::Eager, RunMode::Interpreted, RunMode::Jit),
                         [](const ::testing::TestParamInfo<RunMode>& info) {
                           return std::string(mode_name(info.param));
                         });

TEST(CollectiveOpAutograd, WritesOutsideAutogradAsTorchDoes) {
  RunModeScope mode(RunMode::Eager);
  TwinGroup group;
  Tensor leaf = make(Host({2}, {1.0, 2.0}), DType::Float32);
  leaf.set_requires_grad(true);
  group.all_reduce(leaf);  // torch: allowed on a leaf that requires grad, no grad_fn
  EXPECT_TRUE(leaf.requires_grad());
  EXPECT_EQ(leaf.grad_fn_name(), "");
  expect_near(host(leaf.detach()), {3.0, 5.0}, "leaf");
  Tensor y = leaf * 3.0;
  group.all_reduce(y);  // a value with history keeps it; the collective adds none
  kiln::sum(y).backward();
  expect_near(host(leaf.grad()), {3.0, 3.0}, "grad");
}

TEST(CollectiveOpErrors, ATraceWhoseGroupIsGoneRaisesAndTheTracerGoesOn) {
  RunModeScope mode(RunMode::Interpreted);
  tr::config().background_compile = false;
  auto group = std::make_unique<TwinGroup>();
  Tensor w = random_tensor({3});
  for (int s = 0; s < 5; ++s) step(*group, w, random_tensor({3}));
  ASSERT_GT(total_replays(), 0) << tr::explain().table();
  const int64_t gone = group->id();
  group.reset();
  // The trace's op names the group by id; a call naming it now fails in the shape rule.
  auto call_gone_group = [&] {
    Tensor g = random_tensor({3}) * 1.0;
    kiln::OpCall call{kiln::OpId::AllReduce, {g}, {}, {}};
    call.attrs.count = gone;
    kiln::dispatch_into(call, g);
  };
  try {
    call_gone_group();
    ADD_FAILURE() << "an all_reduce naming a destroyed group was accepted";
  } catch (const kiln::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no longer exists"), std::string::npos) << e.what();
  }
  TwinGroup other;
  Tensor v = make(Host({3}, {1, 2, 3}), DType::Float32);
  for (int s = 0; s < 4; ++s) step(other, v, make(Host({3}, {0, 0, 0}), DType::Float32));
  expect_near(host(v), {1 - 0.4, 2 - 0.4, 3 - 0.4}, "v after the error");
  EXPECT_EQ(other.calls, 4);
}

TEST(CollectiveOpVerify, VerifiedReplaysAgreeAndCallTheBackendForBothRuns) {
  RunModeScope mode(RunMode::Jit);
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#endif
  tr::config().background_compile = false;
  tr::config().verify = true;
  TwinGroup group;
  Tensor w = random_tensor({6});
  std::vector<double> ref_w = host(w);
  for (int s = 0; s < 6; ++s) {
    const Tensor x = random_tensor({6});
    const std::vector<double> hx = host(x);
    step(group, w, x);  // a verified replay throws on a mismatch
    for (size_t i = 0; i < ref_w.size(); ++i) ref_w[i] -= 0.1 * (2 * hx[i] * ref_w[i] + 1);
  }
  expect_near(host(w), ref_w, "w");
  const int64_t replays = total_replays();
  EXPECT_GT(replays, 0) << tr::explain().table();
  // Verify's eager reference runs the collective too (every rank does, alike).
  EXPECT_EQ(group.calls, 6 + replays);
}

}  // namespace
