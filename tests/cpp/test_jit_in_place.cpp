// Several in-place writes in one fused kernel (jit/plan_passes.cpp, `written`): a group
// stays open after an in-place write while later ops read the written tensors element
// for element. Covered: an Adam-like update of two parameters (one kernel each, state
// and parameter written, results equal eager over several replays); the hazards that
// must still split the kernel: a broadcast read, a read through a transposed view, and a
// reduction of a tensor written earlier in the trace.
#include <gtest/gtest.h>

#include "ops/api.h"
#include "reference.h"
#include "tracer/tracer.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

class JitInPlace : public LlvmJitTest {};

struct Param {
  Tensor p, m, v;
};

Param param(const Dims& shape) {
  return Param{random_tensor(shape), random_tensor(shape) * 0.1,
               kiln::abs(random_tensor(shape)) * 0.01};
}

Param copy_of(const Param& a) {
  return eager([&] { return Param{a.p * 1.0, a.m * 1.0, a.v * 1.0}; });
}

// One Adam-like step: state first, then the parameter from the new state.
void adam_step(Param& s, const Tensor& g, double lr, double bc1, double bc2) {
  s.p.copy_(s.p * (1 - lr * 0.01));
  s.m.copy_(s.m + (g - s.m) * 0.1);
  s.v.copy_(s.v * 0.999 + g * g * 0.001);
  s.p.copy_(s.p - lr / bc1 * s.m / (kiln::sqrt(s.v) / bc2 + 1e-8));
}

}  // namespace

TEST_F(JitInPlace, AnOptimizerUpdateIsOneKernelPerParameter) {
  Param a = param({33, 17}), b = param({40});
  Param ea = copy_of(a), eb = copy_of(b);
  for (int i = 1; i <= 7; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const Tensor ga = random_tensor({33, 17}), gb = random_tensor({40});
    const double lr = 0.01 / i, bc1 = 1 - std::pow(0.9, i), bc2 = std::sqrt(1 - std::pow(0.999, i));
    {
      tr::Region region;
      adam_step(a, ga, lr, bc1, bc2);
      adam_step(b, gb, lr, bc1, bc2);
    }
    eager([&] {
      adam_step(ea, ga, lr, bc1, bc2);
      adam_step(eb, gb, lr, bc1, bc2);
      return 0;
    });
    for (auto [x, y] : {std::pair{a.p, ea.p}, std::pair{a.m, ea.m}, std::pair{a.v, ea.v},
                        std::pair{b.p, eb.p}, std::pair{b.m, eb.m}, std::pair{b.v, eb.v}})
      EXPECT_TRUE(all_close(x, read(y), Tol{1e-6, 1e-7}));
  }
  const tr::ExplainReport r = tr::explain();
  ASSERT_EQ(r.traces.size(), 1u) << r.table();
  EXPECT_EQ(r.traces[0].kernels, 2) << r.table();
  EXPECT_GE(r.traces[0].replays, 3) << r.table();
}

TEST_F(JitInPlace, ReadsOfAWrittenTensorAtOtherElementsSplitTheKernel) {
  Tensor row = random_tensor({1, 24}), x = random_tensor({16, 24});
  Tensor sq = random_tensor({24, 24}), y = random_tensor({24, 24});
  Tensor acc = random_tensor({16, 24});
  Tensor erow = eager([&] { return row * 1.0; }), esq = eager([&] { return sq * 1.0; });
  Tensor eacc = eager([&] { return acc * 1.0; });
  auto f = [](Tensor& r, const Tensor& xs, Tensor& s, const Tensor& ys, Tensor& a) {
    r.copy_(kiln::tanh(r) * 0.5);  // then read broadcast over 16 rows
    Tensor out = xs * r + 1.0;
    s.copy_(s * 0.5 + ys);  // then read through a transposed view
    Tensor t = s.transpose(0, 1) + ys;
    a.copy_(a + xs);  // then reduced
    return kiln::sum(out, {0}) + kiln::sum(t, {1}) * 0.5 + kiln::sum(a, {0});
  };
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    Tensor got;
    {
      tr::Region region;
      got = f(row, x, sq, y, acc);
    }
    const Tensor want = eager([&] { return f(erow, x, esq, y, eacc); });
    EXPECT_TRUE(all_close(got, read(want), Tol{1e-4, 1e-4}));
    EXPECT_TRUE(all_close(row, read(erow), Tol{1e-6, 1e-7}));
    EXPECT_TRUE(all_close(sq, read(esq), Tol{1e-5, 1e-6}));
    EXPECT_TRUE(all_close(acc, read(eacc), Tol{1e-5, 1e-6}));
  }
  const tr::ExplainReport r = tr::explain();
  ASSERT_EQ(r.traces.size(), 1u) << r.table();
  EXPECT_GE(r.traces[0].replays, 3) << r.table();
}

// A gradient made inside the trace and then clipped in place (`g.copy_(g * coef)`, as
// clip_grad_norm_ does when backward and clipping are one trace): the write joins the
// kernel that computes it and stores into the value's buffer, so no eager step writes a
// buffer whose address moves between replays (on CUDA that switched the graph off). The
// user holds the written values; a later read of one through a transposed view, and a
// broadcast one, stay right.
TEST_F(JitInPlace, AWriteIntoAValueOfTheTraceJoinsTheKernel) {
  const Tensor a = random_tensor({24, 16}), b = random_tensor({16, 24}), bias = random_tensor({24});
  auto f = [&](const Tensor& x) {
    Tensor g = kiln::matmul(a * x, b);  // a library step's value
    Tensor h = kiln::tanh(g) + bias;    // a kernel's value
    const Tensor coef = 1.0 / (kiln::sqrt(kiln::sum(x * x)) + 1.0);
    g.copy_(g * coef);
    h.copy_(h * coef + 0.5);
    Tensor t = g.transpose(0, 1) * 2.0 + h;  // reads the written values afterwards
    return std::vector<Tensor>{g, h, t};
  };
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    const Tensor x = random_tensor({24, 16});
    std::vector<Tensor> got;
    {
      tr::Region region;
      got = f(x);
    }
    const std::vector<Tensor> want = eager([&] { return f(x); });
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_TRUE(all_close(got[k], read(want[k]), Tol{1e-5, 1e-6})) << "output " << k;
  }
  const tr::ExplainReport r = tr::explain();
  ASSERT_EQ(r.traces.size(), 1u) << r.table();
  EXPECT_GE(r.traces[0].replays, 3) << r.table();
  for (const std::string& note : r.traces[0].notes)
    EXPECT_EQ(note.find("eager"), std::string::npos) << note;
  // a * x; the matmul; tanh + bias; the coefficient; g * coef written into g; h * coef +
  // 0.5 written into h; the transposed read. Without the fused writes each copy_ is an
  // eager step of its own (9).
  EXPECT_EQ(r.traces[0].kernels, 7) << r.table();
}
