// The memory plan of a compiled trace (jit/memory_plan.h), on programs recorded on the CPU
// and planned as the JIT plans them (no compile needed):
//   - no two values whose lifetimes meet share a byte of the arena, in every plan here;
//   - the arena is never below the most bytes alive at once (a plan that claims less
//     overlaps values), and on the programs here it is that bound: two big temporaries
//     that die young separated by small long-lived values (first fit in write order puts
//     the second big one above everything; largest first reuses the first's bytes), and
//     a small training step;
//   - relu's backward mask (a bool made from relu's float input) is made in relu's own
//     kernel, so the input is not kept through the backward for it.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "capture_backend.h"
#include "jit/lower.h"
#include "jit/memory_plan.h"
#include "jit/pipeline.h"
#include "ops/api.h"
#include "ops/autograd/grad_mode.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;
namespace jit = kiln::jit;

namespace {

class MemoryPlanTest : public CapturingTest {
 protected:
  // f's program (run in regions until compiled), fused as the CPU JIT fuses it, and its
  // memory plan; checks that values alive together never share bytes.
  jit::MemoryPlan plan(const std::function<void()>& f) {
    const bool captured = capture(f);
    EXPECT_TRUE(captured) << tr::explain().table();
    if (!captured) return {};
    program_ = *backend_.captured;
    fusion_ = jit::plan_fusion(program_, jit::fusable_except(kiln::DeviceType::CPU, {}));
    const jit::MemoryPlan memory = jit::plan_memory(program_, fusion_);
    check_disjoint(memory);
    return memory;
  }

  // Lifetimes as the plan defines them: from the step writing a value to the last step
  // reading it or a view of it (a value nobody reads: its own step).
  void check_disjoint(const jit::MemoryPlan& memory) {
    const int n = static_cast<int>(program_.ops.size());
    std::vector<int> root(n, -1), first(n, -1), last(n, -1);
    for (int i = 0; i < n; ++i) {
      if (fusion_.canonical[i] != i) continue;
      const tr::TraceOp& op = program_.ops[i];
      root[i] = i;
      const tr::InputRef* base = op.in_place ? &op.target
                                 : kiln::op_info(op.op).family == kiln::OpFamily::View
                                     ? &op.inputs[0]
                                     : nullptr;
      if (base)
        root[i] =
            base->kind == tr::InputRef::Kind::Value ? root[fusion_.canonical[base->index]] : -1;
    }
    for (int i = 0; i < n; ++i) {
      if (fusion_.canonical[i] != i) continue;
      const int at = fusion_.step_of[i];
      auto touch = [&](int r) {
        if (r < 0) return;
        if (first[r] < 0 || at < first[r]) first[r] = at;
        last[r] = std::max(last[r], at);
      };
      for (const tr::InputRef& r : program_.ops[i].inputs)
        if (r.kind == tr::InputRef::Kind::Value) touch(root[fusion_.canonical[r.index]]);
      touch(root[i]);
    }
    auto bytes_of = [&](int i) {
      int64_t numel = 1;
      for (int64_t s : program_.ops[i].meta.sizes) numel *= s;
      return numel * kiln::itemsize(program_.ops[i].meta.dtype);
    };
    int64_t sum = 0;
    for (int a = 0; a < n; ++a) {
      if (memory.offset[a] < 0) continue;
      sum += bytes_of(a);
      EXPECT_LE(memory.offset[a] + bytes_of(a), memory.arena_bytes);
      for (int b = 0; b < a; ++b) {
        if (memory.offset[b] < 0) continue;
        const bool meet = first[a] <= last[b] && first[b] <= last[a];
        const bool share = memory.offset[a] < memory.offset[b] + bytes_of(b) &&
                           memory.offset[b] < memory.offset[a] + bytes_of(a);
        EXPECT_FALSE(meet && share) << "values " << a << " and " << b << " overlap";
      }
    }
    EXPECT_GE(memory.arena_bytes, memory.live_bytes) << memory.str();
    EXPECT_LE(memory.live_bytes, memory.naive_bytes) << memory.str();
    EXPECT_GT(sum, 0);
  }

  tr::TraceProgram program_;
  jit::FusionPlan fusion_;
};

TEST_F(MemoryPlanTest, BigTemporariesBetweenLongLivedSmallValuesShareBytes) {
  const Tensor u = random_tensor({64, 64}), u2 = random_tensor({64, 64});
  const Tensor x = random_tensor({512, 64}), x2 = random_tensor({512, 64});
  const Tensor w = random_tensor({64, 1024});
  Tensor out;
  const jit::MemoryPlan memory = plan([&] {
    const Tensor a = kiln::matmul(u, u);                   // small, read at the end
    const Tensor s1 = kiln::sum(kiln::matmul(x, w), {1});  // 2 MiB, read once
    const Tensor c = kiln::matmul(u, u2);                  // small, read at the end
    const Tensor s2 = kiln::sum(kiln::matmul(x2, w), {1});
    out = kiln::sum(a) + kiln::sum(c) + kiln::sum(s1) + kiln::sum(s2);
  });
  const int64_t big = 512 * 1024 * 4;
  EXPECT_LT(memory.arena_bytes, big + big / 4) << memory.str();  // first fit: 2 big + smalls
  EXPECT_EQ(memory.arena_bytes, memory.live_bytes) << memory.str();
}

TEST_F(MemoryPlanTest, ATrainingStepsArenaIsTheMostAliveAtOnce) {
  std::vector<Tensor> w = {random_tensor({32, 64}), random_tensor({64, 64}),
                           random_tensor({64, 8})};
  for (Tensor& t : w) t.set_requires_grad(true);
  const Tensor x = random_tensor({128, 32});
  const jit::MemoryPlan memory = plan([&] {
    Tensor h = x;
    for (size_t i = 0; i < w.size(); ++i) {
      h = kiln::matmul(h, w[i]);
      if (i + 1 < w.size()) h = kiln::tanh(h);
    }
    kiln::mean(h * h).backward();
    kiln::autograd::NoGradScope no_grad;
    for (Tensor& t : w) {
      t.sub_(t.grad() * 0.01);
      t.grad().zero_();
    }
  });
  EXPECT_GT(memory.live_bytes, 0) << memory.str();
  EXPECT_EQ(memory.arena_bytes, memory.live_bytes) << memory.str();
}

TEST_F(MemoryPlanTest, ReluBackwardMaskIsMadeBesideReluNotKeptFromItsInput) {
  Tensor w1 = random_tensor({32, 256}), w2 = random_tensor({256, 8});
  w1.set_requires_grad(true);
  w2.set_requires_grad(true);
  const Tensor x = random_tensor({512, 32});
  const jit::MemoryPlan memory =
      plan([&] { kiln::mean(kiln::matmul(kiln::relu(kiln::matmul(x, w1)), w2)).backward(); });
  const int n = static_cast<int>(program_.ops.size());
  int relu = -1, mask = -1;
  for (int i = 0; i < n; ++i) {
    if (program_.ops[i].op == kiln::OpId::Relu) relu = i;
    if (program_.ops[i].op == kiln::OpId::Gt) mask = i;
  }
  ASSERT_GE(relu, 0);
  ASSERT_GE(mask, 0);
  // gt(h, 0) runs in relu's kernel and its bool value is what the backward reads ...
  EXPECT_EQ(fusion_.step_of[mask], fusion_.step_of[relu]) << fusion_.str(program_);
  EXPECT_TRUE(fusion_.stored[mask]);
  EXPECT_EQ(program_.ops[mask].meta.dtype, kiln::DType::Bool);
  // ... so nothing reads the matmul's float32 output h after relu's step.
  const int h = fusion_.canonical[program_.ops[relu].inputs[0].index];
  for (int i = 0; i < n; ++i) {
    if (fusion_.canonical[i] != i) continue;
    for (const tr::InputRef& r : program_.ops[i].inputs) {
      if (r.kind == tr::InputRef::Kind::Value && fusion_.canonical[r.index] == h) {
        EXPECT_LE(fusion_.step_of[i], fusion_.step_of[relu]) << fusion_.str(program_);
      }
    }
  }
  EXPECT_GT(memory.live_bytes, 0);
}

}  // namespace
