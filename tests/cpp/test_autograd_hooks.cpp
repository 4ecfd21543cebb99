// Gradient hooks and custom backward functions (ops/autograd/hooks.h) from C++, against
// gradients written here in double loops on fresh random inputs: a non-leaf's hook
// replaces the gradient its producer sees, a leaf's hook replaces what accumulates,
// hooks run in registration order and before retain_grad keeps a gradient, grad()
// captures before an input's hooks, removal (twice: a no-op), the size check, and a
// recorded function's backward with a non-differentiable output and a released graph.
#include <string>
#include <vector>

#include "ops/api.h"
#include "ops/autograd/engine.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/hooks.h"
#include "reference.h"
#include "run_modes.h"

namespace kt {
namespace {

namespace ag = kiln::autograd;
constexpr DType kF64 = DType::Float64;

Tensor leaf(const Host& h) {
  Tensor t = make(h, kF64);
  t.set_requires_grad(true);
  return t;
}

Host scaled(const Host& h, double k) {
  return map(h, [k](double v) { return v * k; });
}

class AutogradHooks : public ::testing::Test {
 protected:
  RunModeScope eager_{RunMode::Eager};
};

TEST_F(AutogradHooks, NonLeafAndLeafHooksReplaceGradients) {
  const Host xh = random_host({3, 4}, kF64);
  Tensor x = leaf(xh);
  std::vector<int> order;
  ag::register_hook(x, [&](const Tensor& g) {
    order.push_back(3);
    return g * 2.0;  // what accumulates into x.grad
  });
  Tensor y = x * 3.0;
  ag::register_hook(y, [&](const Tensor& g) {
    order.push_back(1);
    return g + 1.0;
  });
  ag::register_hook(y, [&](const Tensor&) {
    order.push_back(2);
    return Tensor();  // observe only
  });
  y.retain_grad();
  kiln::sum(y * y).backward();
  // d/dy = 2y, then +1; d/dx = 3 * (2y + 1), then * 2
  const Host gy = map(xh, [](double v) { return 2 * 3 * v + 1; });
  EXPECT_TRUE(all_close(y.grad(), gy, Tol{1e-14, 1e-14}));
  EXPECT_TRUE(all_close(x.grad(), scaled(gy, 6), Tol{1e-14, 1e-14}));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST_F(AutogradHooks, GradCapturesBeforeTheInputsHooksAndRemoveWorks) {
  const Host xh = random_host({5}, kF64);
  Tensor x = leaf(xh);
  ag::HookHandle h = ag::register_hook(x, [](const Tensor& g) { return g * 100.0; });
  Tensor y = x * 3.0;
  ag::register_hook(y, [](const Tensor& g) { return g * 10.0; });
  const Tensor root = kiln::sum(y * y);
  // grad wrt y: before y's hook; grad wrt x: after y's hook, before x's
  const std::vector<Tensor> g = ag::grad({root}, {y, x}, {}, /*retain_graph=*/true);
  EXPECT_TRUE(all_close(g[0], scaled(xh, 6), Tol{1e-14, 0}));
  EXPECT_TRUE(all_close(g[1], scaled(xh, 180), Tol{1e-14, 0}));
  EXPECT_FALSE(x.grad().defined());
  h.remove();
  h.remove();
  root.backward();
  EXPECT_TRUE(all_close(x.grad(), scaled(xh, 180), Tol{1e-14, 0}));
}

TEST_F(AutogradHooks, ErrorsNameTheCall) {
  Tensor plain = make(random_host({2}, kF64), kF64);
  EXPECT_THROW(ag::register_hook(plain, [](const Tensor& g) { return g; }), kiln::Error);
  Tensor x = leaf(random_host({4}, kF64));
  ag::register_hook(x, [](const Tensor& g) { return g.reshape({2, 2}); });
  try {
    kiln::sum(x * 2.0).backward();
    ADD_FAILURE() << "a hook that changes the gradient's size must throw";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[register_hook]"), std::string::npos) << e.what();
  }
}

TEST_F(AutogradHooks, RecordedFunctionBackward) {
  const Host ah = random_host({3}, kF64), bh = random_host({3}, kF64);
  Tensor a = leaf(ah), b = leaf(bh);
  Tensor prod, idx;
  {
    ag::GradModeScope off(false);
    prod = a * b;
    idx = kiln::argmax(a, 0, false);
  }
  int calls = 0;
  // d(a*b): (g * b, g * a), written by hand as a custom function would
  auto fn = [&, a0 = a.detach(), b0 = b.detach()](const kiln::TensorList& g) {
    ++calls;
    EXPECT_FALSE(g[1].defined());  // the index output gets no gradient
    return kiln::TensorList{g[0] * b0, g[0] * a0};
  };
  const std::vector<Tensor> out = ag::record_function("MulFn", fn, {a, b}, {prod, idx}, {true});
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_EQ(out[0].grad_fn_name(), "MulFn");
  kiln::sum(out[0] * 2.0).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(all_close(a.grad(), scaled(bh, 2), Tol{1e-14, 0}));
  EXPECT_TRUE(all_close(b.grad(), scaled(ah, 2), Tol{1e-14, 0}));
  try {  // the graph was released: a second backward names the function
    kiln::sum(out[0]).backward();
    ADD_FAILURE() << "a second backward must throw";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MulFn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kt
