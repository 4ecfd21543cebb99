// Where a compiled CUDA trace is cut into segments for pipelined replay (jit/cuda/
// segments.h), on programs recorded on the CPU and fused as the JIT fuses them (no GPU
// needed): the first segment is short (at least kFirstSegmentOps ops, well under
// kSegmentOps) so the GPU starts soon after the walk does; each segment holds at least its
// minimum (doubling up to kSegmentOps) and the last at least kSegmentOps; every cut is
// legal (no step has ops on both sides, and every value read across a cut is kept); a
// trace under kFirstSegmentOps + kSegmentOps ops stays one segment.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "capture_backend.h"
#include "ops/api.h"
#include "ops/autograd/grad_mode.h"
#include "tracer_util.h"

#ifdef KILN_WITH_CUDA
#include "jit/cuda/segments.h"
#include "jit/lower.h"
#include "jit/pipeline.h"
#endif

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

#ifdef KILN_WITH_CUDA
using namespace kiln::jit;
using namespace kiln::jit::cuda_backend;

class SegmentsTest : public CapturingTest {
 protected:
  SegmentPlan cuts(const std::function<void()>& f) {
    EXPECT_TRUE(capture(f)) << tr::explain().table();
    if (!backend_.captured) return {};
    program_ = *backend_.captured;
    plan_ = plan_fusion(program_, fusable_except(kiln::DeviceType::CUDA, {}));
    const SegmentPlan out = cut_segments(program_, plan_);
    check_legal(out);
    return out;
  }

  void check_legal(const SegmentPlan& out) {
    const size_t n = program_.ops.size();
    ASSERT_FALSE(out.cuts.empty());
    EXPECT_EQ(out.cuts.front().first_step, 0u);
    EXPECT_EQ(out.cuts.back().end_step, plan_.steps.size());
    EXPECT_EQ(out.cuts.back().ops_end, n);
    std::vector<size_t> segment_of_op(n, 0);
    for (size_t k = 0; k < out.cuts.size(); ++k) {
      if (k > 0) {
        EXPECT_EQ(out.cuts[k].first_step, out.cuts[k - 1].end_step);
      }
      const size_t begin = k == 0 ? 0 : out.cuts[k - 1].ops_end;
      for (size_t s = out.cuts[k].first_step; s < out.cuts[k].end_step; ++s) {
        const Step& step = plan_.steps[s];
        std::vector<int> ops =
            step.kind == Step::Kind::Kernel ? step.group.ops : std::vector<int>{step.op};
        for (int i : ops) {
          EXPECT_GE(static_cast<size_t>(i), begin) << "step " << s << " of segment " << k;
          EXPECT_LT(static_cast<size_t>(i), out.cuts[k].ops_end) << "step " << s;
        }
      }
      for (size_t i = begin; i < out.cuts[k].ops_end; ++i) segment_of_op[i] = k;
    }
    for (size_t j = 0; j < n; ++j)
      for (const tr::InputRef& r : program_.ops[j].inputs)
        if (r.kind == tr::InputRef::Kind::Value && segment_of_op[r.index] < segment_of_op[j]) {
          EXPECT_TRUE(value_kept(plan_, r.index))
              << "op " << j << " reads v" << r.index << " across a cut, not kept";
        }
  }

  tr::TraceProgram program_;
  FusionPlan plan_;
};

std::vector<Tensor> weights(int layers) {
  std::vector<Tensor> w;
  for (int i = 0; i < layers; ++i) w.push_back(random_tensor({16, 16}));
  return w;
}

// A chain of small linear layers with tanh: a legal cut after every matmul.
std::function<void()> chain(const std::vector<Tensor>& w, const Tensor& x, Tensor& out) {
  return [&w, &x, &out] {
    Tensor h = x;
    for (const Tensor& wi : w) h = kiln::tanh(kiln::matmul(h, wi)) * 0.5 + h;
    out = kiln::sum(h);
  };
}

TEST_F(SegmentsTest, FirstSegmentsAreShortThenGrowToTheFullSize) {
  const std::vector<Tensor> w = weights(160);
  const Tensor x = random_tensor({8, 16});
  Tensor out;
  const SegmentPlan out_cuts = cuts(chain(w, x, out));
  const size_t n = program_.ops.size();
  ASSERT_GT(n, kFirstSegmentOps + 2 * kSegmentOps);
  ASSERT_GE(out_cuts.cuts.size(), 4u);
  size_t min_ops = kFirstSegmentOps, begin = 0;
  for (size_t k = 0; k < out_cuts.cuts.size(); ++k) {
    const size_t ops = out_cuts.cuts[k].ops_end - begin;
    if (k + 1 < out_cuts.cuts.size()) {
      EXPECT_GE(ops, min_ops) << "segment " << k;
      // cut at the first legal place: at most one layer (4 ops) past the minimum
      EXPECT_LE(ops, min_ops + 8) << "segment " << k;
    } else {
      EXPECT_GE(ops, kSegmentOps);
    }
    min_ops = std::min(kSegmentOps, 2 * min_ops);
    begin = out_cuts.cuts[k].ops_end;
  }
  EXPECT_LT(out_cuts.cuts[0].ops_end, kSegmentOps / 2);  // the GPU starts early
}

TEST_F(SegmentsTest, AShortTraceIsOneSegment) {
  const std::vector<Tensor> w = weights(40);
  const Tensor x = random_tensor({8, 16});
  Tensor out;
  const SegmentPlan out_cuts = cuts(chain(w, x, out));
  ASSERT_LT(program_.ops.size(), kFirstSegmentOps + kSegmentOps);
  EXPECT_EQ(out_cuts.cuts.size(), 1u);
}

TEST_F(SegmentsTest, ATrainingStepsCutsAreLegal) {
  std::vector<Tensor> w = weights(48);
  for (Tensor& t : w) t.set_requires_grad(true);
  const Tensor x = random_tensor({8, 16});
  Tensor out;
  const SegmentPlan out_cuts = cuts([&] {
    chain(w, x, out)();
    out.backward();
    kiln::autograd::NoGradScope no_grad;
    for (Tensor& t : w) {
      t.sub_(t.grad() * 0.01);
      t.grad().zero_();
    }
  });
  EXPECT_GE(out_cuts.cuts.size(), 2u) << program_.ops.size() << " ops";
}
#endif

}  // namespace
