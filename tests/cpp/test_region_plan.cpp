// tracer/region_plan.h: the plan a region call replayed from entry to exit is kept (when
// asked for), launches on new inputs with the values eager gives, refuses inputs its
// guards reject, and is not kept for a region with a graph break or a random op.
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;

Tensor body(const Tensor& x, const Tensor& w) {
  return kiln::relu(kiln::matmul(x, w)) * kiln::Scalar(0.5) + kiln::Scalar(1.0);
}

// Runs body in a region, the way kiln.compile(fn, skip=True) does, and takes the plan.
tr::RegionPlan call_in_region(const Tensor& x, const Tensor& w, Tensor* out) {
  tr::Tracer::current().keep_region_plans(true);
  {
    tr::Region region({"plan"});
    *out = body(x, w);
  }
  tr::Tracer::current().keep_region_plans(false);
  return tr::Tracer::current().take_region_plan();
}

int output_index(const tr::RegionPlan& plan, const Tensor& t) {
  for (size_t i = 0; i < plan.outputs.size(); ++i)
    if (plan.outputs[i].lock().get() == t.impl()) return static_cast<int>(i);
  return -1;
}

TEST_F(TracerTest, RegionPlanLaunchesOnNewInputsLikeEager) {
  Tensor x = random_tensor({4, 6}), w = random_tensor({6, 3}), y;
  tr::RegionPlan plan;
  for (int i = 0; i < 4 && !plan.trace; ++i) plan = call_in_region(x, w, &y);
  ASSERT_TRUE(plan.trace) << "no plan after warmup";
  ASSERT_EQ(plan.externals.size(), 2u);
  const int result = output_index(plan, y);
  ASSERT_GE(result, 0);
  for (int i = 0; i < 3; ++i) {
    Tensor x2 = random_tensor({4, 6});
    std::vector<Tensor> values;
    // the inputs bound in the recorded order: x then w
    ASSERT_EQ(tr::launch(plan, {x2, w}, {result}, &values), "");
    ASSERT_EQ(values.size(), 1u);
    const Host ref = read(eager([&] { return body(x2, w); }));
    EXPECT_TRUE(all_close(values[0], ref, tol_pointwise(DType::Float32)));
  }
  std::vector<Tensor> values;
  const std::string failed = tr::launch(plan, {random_tensor({5, 6}), w}, {result}, &values);
  EXPECT_NE(failed.find("input 0"), std::string::npos) << failed;
  EXPECT_TRUE(values.empty());
}

TEST_F(TracerTest, RegionPlanNotKeptUnlessAskedOrAcrossABreakOrRandomOp) {
  Tensor x = random_tensor({4, 6}), w = random_tensor({6, 3});
  for (int i = 0; i < 4; ++i) {
    tr::Region region({"unasked"});
    body(x, w);
  }
  EXPECT_FALSE(tr::Tracer::current().take_region_plan().trace);

  tr::Tracer::current().keep_region_plans(true);
  for (int i = 0; i < 4; ++i) {
    tr::Region region({"break"});
    Tensor h = kiln::matmul(x, w);
    (void)kiln::sum(h).item<double>();  // a graph break inside the region
    body(h, random_tensor({3, 2}));
  }
  EXPECT_FALSE(tr::Tracer::current().take_region_plan().trace);
  for (int i = 0; i < 4; ++i) {
    tr::Region region({"random"});
    body(x + kiln::rand({4, 6}), w);
  }
  EXPECT_FALSE(tr::Tracer::current().take_region_plan().trace);
  tr::Tracer::current().keep_region_plans(false);
}

}  // namespace
}  // namespace kt
