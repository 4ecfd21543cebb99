// Reverse-mode autograd (ops/autograd/): every differentiable op of ops/ops.def checked
// against central finite differences in float64 on fresh random inputs with a random
// upstream gradient (every input, all at once and one at a time); a few ops against
// analytic gradients written here in double loops; the rule table (every op has a rule
// or is listed as non-differentiable, and every rule is exercised by a case); engine
// semantics (accumulation, retain_graph, no_grad, detach, in-place rules and the version
// check, retain_grad, autograd::grad, diamonds, dtypes, checkpoint); the losses; the
// optimizers against PyTorch's update rules reimplemented here; and a training loop
// traced and JIT-compiled against the same loop run eagerly.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ops/api.h"
#include "ops/autograd/checkpoint.h"
#include "ops/autograd/engine.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/node.h"
#include "ops/autograd/rules.h"
#include "ops/dispatch.h"
#include "ops/losses.h"
#include "ops/optim/optimizer.h"
#include "run_modes.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace ag = kiln::autograd;
using kiln::OpId;
using kiln::Scalar;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

constexpr DType kF64 = DType::Float64;

// ---------------------------------------------------------------- helpers

Range range(double lo, double hi) {
  Range r;
  r.lo = lo;
  r.hi = hi;
  return r;
}
// Values in [lo, hi] with |x| >= min_abs (away from a kink or pole at 0).
Range away_from_zero(double min_abs = 0.1, double lo = -2.0, double hi = 2.0) {
  Range r = range(lo, hi);
  r.nonzero = true;
  r.min_abs = min_abs;
  return r;
}
Range positive(double lo = 0.3, double hi = 2.5) { return range(lo, hi); }

Tensor leaf(const Host& h, DType d = kF64) {
  Tensor t = make(h, d);
  t.set_requires_grad(true);
  return t;
}

double dot(const Host& a, const Host& b) {
  EXPECT_EQ(a.v.size(), b.v.size());
  double s = 0;
  for (size_t i = 0; i < a.v.size() && i < b.v.size(); ++i) s += a.v[i] * b.v[i];
  return s;
}

Tensor i64(const std::vector<int64_t>& v, const Dims& sizes) {
  return kiln::from_vector<int64_t>(v, sizes);
}

// ---------------------------------------------------------------- finite differences

struct Input {
  Dims sizes;
  Range range{};
};

struct GradCase {
  std::string name;
  std::vector<Input> inputs;
  Fn fn;
  Tol tol{1e-5, 1e-6};
  double h = 1e-6;  // central difference step
};

Host evaluate(const GradCase& c, const std::vector<Host>& xs) {
  ag::NoGradScope no_grad;
  std::vector<Tensor> ts;
  for (const Host& x : xs) ts.push_back(make(x, kF64));
  return read(c.fn(ts));
}

// d(sum(fn(xs) * g)) / d(xs[i]) by central differences.
std::vector<Host> numeric_grads(const GradCase& c, const std::vector<Host>& xs, const Host& g) {
  std::vector<Host> out;
  std::vector<Host> p = xs;
  for (size_t i = 0; i < xs.size(); ++i) {
    Host gi(xs[i].sizes);
    for (size_t j = 0; j < xs[i].v.size(); ++j) {
      const double v = xs[i].v[j];
      p[i].v[j] = v + c.h;
      const double plus = dot(evaluate(c, p), g);
      p[i].v[j] = v - c.h;
      const double minus = dot(evaluate(c, p), g);
      p[i].v[j] = v;
      gi.v[j] = (plus - minus) / (2 * c.h);
    }
    out.push_back(std::move(gi));
  }
  return out;
}

// Runs fn on leaves (those in `which` require grad) and backward(g); returns the leaves.
std::vector<Tensor> analytic(const GradCase& c, const std::vector<Host>& xs, const Host& g,
                             const std::vector<bool>& which, Tensor* out = nullptr) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < xs.size(); ++i)
    leaves.push_back(which[i] ? leaf(xs[i]) : make(xs[i], kF64));
  Tensor y = c.fn(leaves);
  EXPECT_TRUE(y.requires_grad()) << c.name;
  EXPECT_FALSE(y.is_leaf()) << c.name;
  y.backward(make(g, kF64));
  if (out) *out = y;
  return leaves;
}

// The gradcheck of one case on fresh random inputs.
void check_gradients(const GradCase& c) {
  SCOPED_TRACE(c.name);
  std::vector<Host> xs;
  for (const Input& in : c.inputs) xs.push_back(random_host(in.sizes, kF64, in.range));
  const Host y0 = evaluate(c, xs);
  const Host g = random_host(y0.sizes, kF64, range(-1.0, 1.0));
  const std::vector<Host> expected = numeric_grads(c, xs, g);

  Tensor y;
  const std::vector<Tensor> all = analytic(c, xs, g, std::vector<bool>(xs.size(), true), &y);
  EXPECT_TRUE(all_close(y, y0, Tol{1e-12, 1e-12})) << "forward with history differs";
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor gi = all[i].grad();
    ASSERT_TRUE(gi.defined()) << "input " << i << " got no gradient";
    EXPECT_EQ(gi.dtype(), kF64) << "input " << i;
    EXPECT_TRUE(all_close(gi, expected[i], c.tol)) << "input " << i << " (all inputs require grad)";
  }
  if (xs.size() < 2) return;
  // Each input alone: the rules' saved-input masks and skipped branches.
  for (size_t i = 0; i < xs.size(); ++i) {
    std::vector<bool> which(xs.size(), false);
    which[i] = true;
    const std::vector<Tensor> one = analytic(c, xs, g, which);
    ASSERT_TRUE(one[i].grad().defined()) << "input " << i << " alone got no gradient";
    EXPECT_TRUE(all_close(one[i].grad(), expected[i], c.tol)) << "input " << i << " alone";
    for (size_t k = 0; k < xs.size(); ++k) {
      if (k == i) continue;
      EXPECT_FALSE(one[k].grad().defined()) << "input " << k;
    }
  }
}

// ---------------------------------------------------------------- the cases
// Cases hold no random data (the inputs are drawn when a case runs); index tensors and
// conditions are fixed patterns built inside fn.

Tensor fixed_cond(const Dims& sizes) {
  std::vector<bool> v;
  const int64_t n = numel_of(sizes);
  for (int64_t i = 0; i < n; ++i) v.push_back((i * 7 + i / 3) % 3 != 0);
  return kiln::from_vector<bool>(v, sizes);
}

Tensor to_device_cpu(const Tensor& x) {  // the ToDevice op itself (to() skips a no-op)
  kiln::OpCall call{OpId::ToDevice, {x}, {}, {}};
  call.attrs.device = kiln::kCPU;
  return kiln::dispatch(call);
}

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);
using BinaryTS = Tensor (*)(const Tensor&, const Scalar&);
using BinarySt = Tensor (*)(const Scalar&, const Tensor&);

std::vector<GradCase> build_cases() {
  std::vector<GradCase> cs;
  auto add = [&](std::string name, std::vector<Input> in, Fn fn, Tol tol = {1e-5, 1e-6},
                 double h = 1e-6) {
    cs.push_back(GradCase{std::move(name), std::move(in), std::move(fn), tol, h});
  };
  const Dims s34{3, 4};

  // ---- unary
  struct U {
    const char* name;
    Unary fn;
    Range r;
  };
  for (const U& u : std::vector<U>{{"neg", kiln::neg, {}},
                                   {"abs", kiln::abs, away_from_zero()},
                                   {"exp", kiln::exp, {}},
                                   {"log", kiln::log, positive(0.2, 3.0)},
                                   {"sqrt", kiln::sqrt, positive()},
                                   {"rsqrt", kiln::rsqrt, positive()},
                                   {"sin", kiln::sin, range(-4, 4)},
                                   {"cos", kiln::cos, range(-4, 4)},
                                   {"tanh", kiln::tanh, range(-3, 3)},
                                   {"sigmoid", kiln::sigmoid, range(-5, 5)},
                                   {"relu", kiln::relu, away_from_zero()},
                                   {"silu", kiln::silu, range(-4, 4)},
                                   {"reciprocal", kiln::reciprocal, away_from_zero(0.3)},
                                   {"erf", kiln::erf, range(-2.5, 2.5)},
                                   {"log1p", kiln::log1p, positive(0.2, 3.0)}}) {
    Unary f = u.fn;
    add(u.name, {{s34, u.r}}, [f](const auto& x) { return f(x[0]); });
  }
  add("gelu_exact", {{s34, range(-4, 4)}}, [](const auto& x) { return kiln::gelu(x[0]); });
  add("gelu_tanh", {{s34, range(-4, 4)}}, [](const auto& x) { return kiln::gelu(x[0], true); });
  add("cast_clone", {{s34}}, [](const auto& x) { return x[0].clone(); });
  // float64 -> float32: linear, so a wide step is exact up to float32 rounding.
  add(
      "cast_to_float32", {{s34}}, [](const auto& x) { return x[0].to(DType::Float32) * 3.0; },
      Tol{1e-4, 1e-4}, 1e-2);
  add("clamp_min", {{s34}}, [](const auto& x) { return kiln::clamp(x[0], Scalar(-0.5), {}); });
  add("clamp_max", {{s34}}, [](const auto& x) { return kiln::clamp(x[0], {}, Scalar(0.7)); });
  add("clamp_both", {{{2, 3, 4}}},
      [](const auto& x) { return kiln::clamp(x[0], Scalar(-0.6), Scalar(0.4)); });

  // ---- binary: tensor-tensor with broadcasting, tensor-scalar, scalar-tensor
  struct B {
    const char* name;
    Binary tt;
    BinaryTS ts;
    BinarySt st;
    Range a, b;
    double scalar;
  };
  const std::vector<B> binaries = {
      {"add", kiln::add, kiln::add, kiln::add, {}, {}, 1.5},
      {"sub", kiln::sub, kiln::sub, kiln::sub, {}, {}, -0.75},
      {"mul", kiln::mul, kiln::mul, kiln::mul, {}, {}, -1.7},
      {"div", kiln::div, kiln::div, kiln::div, away_from_zero(0.4), away_from_zero(0.4), 1.3},
      {"pow", kiln::pow, kiln::pow, kiln::pow, positive(0.4, 2.0), range(-1.5, 1.5), 1.7},
      {"maximum", kiln::maximum, kiln::maximum, kiln::maximum, {}, {}, 0.3},
      {"minimum", kiln::minimum, kiln::minimum, kiln::minimum, {}, {}, -0.2},
  };
  for (const B& b : binaries) {
    const std::string n = b.name;
    Binary tt = b.tt;
    BinaryTS ts = b.ts;
    BinarySt st = b.st;
    const double s = b.scalar;
    add(n + "_same_shape", {{s34, b.a}, {s34, b.b}},
        [tt](const auto& x) { return tt(x[0], x[1]); });
    add(n + "_broadcast", {{{2, 3, 1}, b.a}, {{3, 4}, b.b}},
        [tt](const auto& x) { return tt(x[0], x[1]); });
    add(n + "_broadcast_rhs", {{{2, 3, 4}, b.a}, {{3, 1}, b.b}},
        [tt](const auto& x) { return tt(x[0], x[1]); });
    add(n + "_zero_dim_rhs", {{s34, b.a}, {{}, b.b}},
        [tt](const auto& x) { return tt(x[0], x[1]); });
    add(n + "_tensor_scalar", {{s34, b.a}}, [ts, s](const auto& x) { return ts(x[0], Scalar(s)); });
    // scalar op tensor: the tensor takes b's range (a divisor, an exponent)
    add(n + "_scalar_tensor", {{s34, b.b}}, [st, s](const auto& x) { return st(Scalar(s), x[0]); });
  }
  add("pow_tensor_int_scalar", {{s34}}, [](const auto& x) { return kiln::pow(x[0], Scalar(3)); });
  add("pow_tensor_negative_scalar", {{s34, positive()}},
      [](const auto& x) { return kiln::pow(x[0], Scalar(-1.5)); });
  add("pow_tensor_zero_scalar", {{s34}},
      [](const auto& x) { return kiln::pow(x[0], Scalar(0.0)) * x[0]; });
  add("operators", {{s34}, {{4}, away_from_zero(0.5)}},
      [](const auto& x) { return (x[0] * 2.0 - x[1]) / x[1] + 1.0 - (-x[0]); });

  // ---- where
  add("where_broadcast", {{{3, 1}}, {{4}}}, [](const auto& x) {
    return kiln::where(fixed_cond({3, 4}), x[0], x[1]);
  });
  add("where_same_shape", {{s34}, {s34}}, [](const auto& x) {
    return kiln::where(fixed_cond({3, 4}), x[0], x[1]);
  });
  add("where_tensor_scalar", {{s34}}, [](const auto& x) {
    return kiln::where(fixed_cond({3, 4}), x[0], Scalar(2.5));
  });
  add("where_scalar_tensor", {{{4}}}, [](const auto& x) {
    return kiln::where(fixed_cond({3, 4}), Scalar(-1.0), x[0]);
  });

  // ---- reductions
  const Dims s234{2, 3, 4};
  struct R {
    const char* name;
    Dims dims;
    bool keepdim;
  };
  const std::vector<R> reductions = {
      {"all", {}, false},        {"all_keepdim", {}, true},
      {"dim1", {1}, false},      {"dim1_keepdim", {1}, true},
      {"dims02", {0, 2}, false}, {"dims02_keepdim", {0, 2}, true},
      {"dim_neg1", {-1}, false}, {"dims_neg1_0_keepdim", {-1, 0}, true}};
  for (const R& r : reductions) {
    const Dims d = r.dims;
    const bool k = r.keepdim;
    const std::string suffix = std::string("_") + r.name;
    add("sum" + suffix, {{s234}}, [d, k](const auto& x) { return kiln::sum(x[0], d, k); });
    add("mean" + suffix, {{s234}}, [d, k](const auto& x) { return kiln::mean(x[0], d, k); });
    add("amax" + suffix, {{s234}}, [d, k](const auto& x) { return kiln::amax(x[0], d, k); });
    add("amin" + suffix, {{s234}}, [d, k](const auto& x) { return kiln::amin(x[0], d, k); });
    add("var" + suffix, {{s234}}, [d, k](const auto& x) { return kiln::var(x[0], d, 1, k); });
    add("logsumexp" + suffix, {{s234}},
        [d, k](const auto& x) { return kiln::logsumexp(x[0], d, k); });
  }
  add("var_correction0", {{s234}}, [](const auto& x) { return kiln::var(x[0], {2}, 0, false); });
  add("var_correction2_keepdim", {{s234}}, [](const auto& x) {
    return kiln::var(x[0], {0, 1}, 2, true);
  });
  add("max_dim", {{s234}}, [](const auto& x) { return kiln::max(x[0], 1, false); });
  add("min_all", {{s234}}, [](const auto& x) { return kiln::min(x[0]); });
  add("sum_zero_dim", {{{}}}, [](const auto& x) { return kiln::sum(x[0]) * 2.0; });

  // ---- softmax, log_softmax, layer_norm
  for (int64_t dim : {-1, 0, 1}) {
    const std::string d = dim < 0 ? "neg1" : std::to_string(dim);
    add("softmax_dim" + d, {{s234}}, [dim](const auto& x) { return kiln::softmax(x[0], dim); });
    add("log_softmax_dim" + d, {{s234}},
        [dim](const auto& x) { return kiln::log_softmax(x[0], dim); });
  }
  add("layer_norm_plain", {{s234}}, [](const auto& x) { return kiln::layer_norm(x[0], {4}); });
  add("layer_norm_weight_bias_2d", {{s234}, {{3, 4}}, {{3, 4}}}, [](const auto& x) {
    return kiln::layer_norm(x[0], {3, 4}, x[1], x[2]);
  });
  add("layer_norm_weight_only", {{s234}, {{4}}},
      [](const auto& x) { return kiln::layer_norm(x[0], {4}, x[1]); });
  add("layer_norm_bias_only", {{s234}, {{4}}},
      [](const auto& x) { return kiln::layer_norm(x[0], {4}, Tensor(), x[1], 1e-3); });
  add("layer_norm_1d", {{{5}}, {{5}}, {{5}}},
      [](const auto& x) { return kiln::layer_norm(x[0], {5}, x[1], x[2]); });

  // ---- fused attention (attention_output's rule: the fused CPU backward)
  add("attention_plain", {{{2, 3, 4}}, {{2, 5, 4}}, {{2, 5, 3}}},
      [](const auto& x) { return kiln::scaled_dot_product_attention(x[0], x[1], x[2]); });
  add("attention_causal_scale", {{{1, 2, 6, 3}}, {{1, 2, 4, 3}}, {{1, 2, 4, 5}}},
      [](const auto& x) {
        return kiln::scaled_dot_product_attention(x[0], x[1], x[2], {}, true, 0.7);
      });
  add("attention_bool_mask", {{{2, 3, 4}}, {{2, 5, 4}}, {{2, 5, 2}}}, [](const auto& x) {
    const Tensor mask =
        kiln::from_vector<bool>({1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1}, {3, 5});
    return kiln::scaled_dot_product_attention(x[0], x[1], x[2], mask);
  });
  add("attention_float_mask", {{{2, 3, 4}}, {{2, 5, 4}}, {{2, 5, 4}}}, [](const auto& x) {
    const Tensor mask = kiln::from_vector<double>(
        {0.5, -1, 2, 0, 0.25, -0.5, 1, 1.5, -2, 0, 0.75, 0.1, -0.3, 0.2, -1.2}, {3, 5});
    return kiln::scaled_dot_product_attention(x[0], x[1], x[2], mask);
  });

  // ---- fused LSTM layer (lstm_output's rule: the fused CPU backward); xw [T, B, 4H],
  // h0, c0 [B, H], w_hh [4H, H] with T 3, B 2, H 2; every row of y (h_t and c_n) in the
  // checked sum, both time directions
  for (const bool reverse : {false, true}) {
    add(reverse ? "lstm_layer_reverse" : "lstm_layer", {{{3, 2, 8}}, {{2, 2}}, {{2, 2}}, {{8, 2}}},
        [reverse](const auto& x) { return kiln::lstm_layer(x[0], x[1], x[2], x[3], reverse); });
  }

  // ---- matmul, linear
  struct M {
    const char* name;
    Dims a, b;
  };
  for (const M& m : std::vector<M>{{"1d_1d", {4}, {4}},
                                   {"1d_2d", {4}, {4, 3}},
                                   {"2d_1d", {3, 4}, {4}},
                                   {"2d_2d", {3, 4}, {4, 5}},
                                   {"3d_2d", {2, 3, 4}, {4, 5}},
                                   {"2d_3d", {3, 4}, {2, 4, 5}},
                                   {"batch_broadcast", {2, 1, 3, 4}, {3, 4, 2}},
                                   {"1d_3d", {4}, {2, 4, 3}},
                                   {"3d_1d", {2, 3, 4}, {4}}}) {
    add(std::string("matmul_") + m.name, {{m.a}, {m.b}},
        [](const auto& x) { return kiln::matmul(x[0], x[1]); });
  }
  add("linear_bias", {{{3, 4}}, {{5, 4}}, {{5}}},
      [](const auto& x) { return kiln::linear(x[0], x[1], x[2]); });
  add("linear_no_bias", {{{3, 4}}, {{5, 4}}},
      [](const auto& x) { return kiln::linear(x[0], x[1]); });
  add("linear_3d_input", {{{2, 3, 4}}, {{5, 4}}, {{5}}},
      [](const auto& x) { return kiln::linear(x[0], x[1], x[2]); });
  add("linear_1d_input", {{{4}}, {{5, 4}}, {{5}}},
      [](const auto& x) { return kiln::linear(x[0], x[1], x[2]); });

  // ---- conv2d, pooling, im2col / col2im
  add("conv2d_bias_stride_padding", {{{2, 3, 6, 5}}, {{4, 3, 3, 2}}, {{4}}}, [](const auto& x) {
    return kiln::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2});
  });
  add("conv2d_no_bias", {{{1, 2, 5, 5}}, {{3, 2, 2, 2}}},
      [](const auto& x) { return kiln::conv2d(x[0], x[1]); });
  add("conv2d_uncovered_rows", {{{1, 2, 6, 6}}, {{2, 2, 3, 3}}, {{2}}}, [](const auto& x) {
    return kiln::conv2d(x[0], x[1], x[2], {2, 2}, {0, 0});
  });
  add("conv2d_3d_input", {{{3, 5, 4}}, {{2, 3, 3, 3}}, {{2}}}, [](const auto& x) {
    return kiln::conv2d(x[0], x[1], x[2], {1, 1}, {1, 1});
  });
  add("max_pool2d_stride_padding", {{{2, 2, 6, 7}}}, [](const auto& x) {
    return kiln::max_pool2d(x[0], {3, 2}, {2, 2}, {1, 1});
  });
  add("max_pool2d_default_stride", {{{1, 3, 4, 6}}}, [](const auto& x) {
    return kiln::max_pool2d(x[0], {2, 2});
  });
  add("max_pool2d_overlapping_3d", {{{2, 5, 5}}}, [](const auto& x) {
    return kiln::max_pool2d(x[0], {3, 3}, {1, 1}, {1, 1});
  });
  add("avg_pool2d_stride_padding", {{{2, 2, 6, 7}}}, [](const auto& x) {
    return kiln::avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1});
  });
  add("avg_pool2d_default_stride", {{{1, 3, 4, 6}}}, [](const auto& x) {
    return kiln::avg_pool2d(x[0], {2, 3});
  });
  add("avg_pool2d_overlapping_3d", {{{2, 5, 5}}}, [](const auto& x) {
    return kiln::avg_pool2d(x[0], {3, 3}, {1, 1}, {1, 1});
  });
  add("im2col", {{{2, 2, 5, 4}}}, [](const auto& x) {
    return kiln::im2col(x[0], {2, 3}, {2, 1}, {1, 0});
  });
  add("im2col_pad_value", {{{1, 2, 4, 4}}}, [](const auto& x) {
    return kiln::im2col(x[0], {3, 3}, {1, 1}, {1, 1}, 1.5);
  });
  // [2, 2*2*3, 3*2]: kernel 2x3, stride (2, 1), padding (1, 0) over a 5x4 image
  add("col2im", {{{2, 12, 6}}}, [](const auto& x) {
    return kiln::col2im(x[0], {5, 4}, {2, 3}, {2, 1}, {1, 0});
  });

  // ---- cat, index_select, to_device
  add("cat_dim0", {{{2, 3}}, {{1, 3}}, {{3, 3}}}, [](const auto& x) {
    return kiln::cat({x[0], x[1], x[2]}, 0);
  });
  add("cat_dim_neg1", {{{2, 3}}, {{2, 1}}}, [](const auto& x) {
    return kiln::cat({x[0], x[1]}, -1);
  });
  add("cat_same_tensor_twice", {{{2, 3}}}, [](const auto& x) {
    return kiln::cat({x[0], x[0] * 2.0}, 1);
  });
  add("index_select_dim0_repeats", {{{4, 3}}}, [](const auto& x) {
    return kiln::index_select(x[0], 0, i64({2, 0, 2, 1, 2}, {5}));
  });
  add("index_select_dim1", {{{2, 4, 3}}}, [](const auto& x) {
    return kiln::index_select(x[0], 1, i64({3, 3, 0}, {3}));
  });
  add("index_select_dim_neg1_int32", {{{2, 3, 4}}}, [](const auto& x) {
    return kiln::index_select(x[0], -1, kiln::from_vector<int32_t>({1, 1, 1, 3, 0}, {5}));
  });
  add("embedding", {{{5, 3}}}, [](const auto& x) {
    return kiln::embedding(x[0], i64({4, 0, 4, 2, 1, 4}, {2, 3}));
  });
  // ---- along one dim: gather / scatters, sort values (through gather), scans, prod
  add("gather_dim1_repeats", {{{3, 4}}}, [](const auto& x) {
    return kiln::gather(x[0], 1, i64({0, 3, 3, 1, 2, 2}, {3, 2}));
  });
  add("scatter_src_and_input", {{{3, 4}}, {{2, 4}}}, [](const auto& x) {
    return kiln::scatter(x[0], 0, i64({2, 0, 1, 2, 0, 1, 2, 0}, {2, 4}), x[1]);
  });
  add("scatter_value", {{{3, 4}}}, [](const auto& x) {
    return kiln::scatter(x[0], 1, i64({3, 0, 2}, {3, 1}), kiln::Scalar(1.5));
  });
  add("scatter_add_repeats_small_index", {{{3, 4}}, {{3, 5}}}, [](const auto& x) {
    return kiln::scatter_add(x[0], 1, i64({0, 0, 3, 1, 1, 2}, {3, 2}), x[1]);
  });
  add("index_add_alpha", {{{4, 3}}, {{5, 3}}}, [](const auto& x) {
    return kiln::index_add(x[0], 0, i64({3, 0, 3, 2, 1}, {5}), x[1], 2.5);
  });
  add("sort_values", {{{3, 5}}}, [](const auto& x) { return kiln::sort(x[0], 1, true).values; });
  add("topk_values", {{{4, 3}}}, [](const auto& x) { return kiln::topk(x[0], 2, 0).values; });
  add("cumsum_dim1", {{s234}}, [](const auto& x) { return kiln::cumsum(x[0], 1); });
  add("cumprod_nonzero", {{{3, 4}, away_from_zero(0.3)}},
      [](const auto& x) { return kiln::cumprod(x[0], -1); });
  add("prod_dim_keepdim", {{s234}}, [](const auto& x) { return kiln::prod(x[0], 1, true); });
  add("prod_with_zeros", {{{2, 4}}}, [](const auto& x) {
    const Tensor mask = i64({1, 0, 1, 1, 0, 0, 1, 1}, {2, 4}).to(x[0].dtype());
    return kiln::prod(x[0] * mask, 1);  // one zero in row 0, two in row 1
  });
  add("prod_all", {{{2, 3}}}, [](const auto& x) { return kiln::prod(x[0]); });
  add("to_device_cpu", {{s34}}, [](const auto& x) { return to_device_cpu(x[0]) * x[0]; });

  // ---- views
  add("view", {{s234}}, [](const auto& x) { return x[0].view({4, 6}); });
  add("reshape_copy", {{s34}}, [](const auto& x) { return x[0].t().reshape({-1}); });
  add("flatten", {{s234}}, [](const auto& x) { return x[0].flatten(1); });
  add("permute", {{s234}}, [](const auto& x) { return x[0].permute({2, 0, 1}); });
  add("permute_negative_dims", {{s234}}, [](const auto& x) { return x[0].permute({-1, 0, -2}); });
  add("transpose", {{s234}}, [](const auto& x) { return x[0].transpose(0, 2); });
  add("t", {{s34}}, [](const auto& x) { return x[0].t(); });
  add("slice_step", {{{3, 7}}}, [](const auto& x) { return x[0].slice(1, 1, 7, 2); });
  add("slice_negative_start", {{{5, 3}}}, [](const auto& x) { return x[0].slice(0, -3, 5, 1); });
  add("narrow", {{s234}}, [](const auto& x) { return x[0].narrow(2, 1, 2); });
  add("select", {{s234}}, [](const auto& x) { return x[0].select(1, -1); });
  add("select_dim0", {{s234}}, [](const auto& x) { return x[0].select(0, 1); });
  add("expand", {{{3, 1}}}, [](const auto& x) { return x[0].expand({2, 3, 4}); });
  add("expand_keep", {{{1, 4}}}, [](const auto& x) { return x[0].expand({3, -1}); });
  add("squeeze_all", {{{3, 1, 4, 1}}}, [](const auto& x) { return x[0].squeeze(); });
  add("squeeze_dim", {{{3, 1, 4}}}, [](const auto& x) { return x[0].squeeze(1); });
  add("unsqueeze", {{s34}}, [](const auto& x) { return x[0].unsqueeze(0); });
  add("unsqueeze_neg1", {{s34}}, [](const auto& x) { return x[0].unsqueeze(-1); });
  add("chunk_split_stack", {{{4, 6}}}, [](const auto& x) {
    std::vector<Tensor> parts = kiln::chunk(x[0], 3, 1);
    std::vector<Tensor> rows = kiln::split(x[0], std::vector<int64_t>{1, 3}, 0);
    return kiln::sum(kiln::stack({parts[2] * 2.0, parts[0]}, 1), {2}) +
           kiln::sum(rows[0].slice(1, 0, 4));
  });
  add("view_of_view_chain", {{s234}}, [](const auto& x) {
    return x[0].transpose(1, 2).slice(0, 1, 2).squeeze(0).unsqueeze(1) * 2.0;
  });
  return cs;
}

const std::vector<GradCase>& grad_cases() {
  static const std::vector<GradCase> cases = build_cases();
  return cases;
}

class Gradcheck : public ::testing::TestWithParam<size_t> {
 protected:
  RunModeScope eager_{RunMode::Eager};
};

TEST_P(Gradcheck, MatchesCentralDifferences) { check_gradients(grad_cases()[GetParam()]); }

INSTANTIATE_TEST_SUITE_P(Ops, Gradcheck, ::testing::Range<size_t>(0, grad_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return grad_cases()[info.param].name;
                         });

// The same backward passes traced and JIT-compiled (the rules' ops fused and replayed on
// lazy values) against the eager backward on the same inputs.
class GradcheckJit : public ::testing::TestWithParam<size_t> {};

TEST_P(GradcheckJit, TracedBackwardMatchesEager) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#endif
  const GradCase& c = grad_cases()[GetParam()];
  std::vector<Host> xs;
  for (const Input& in : c.inputs) xs.push_back(random_host(in.sizes, kF64, in.range));
  const std::vector<bool> all(xs.size(), true);
  std::vector<Host> expected;
  Host g;
  {
    RunModeScope eager(RunMode::Eager);
    g = random_host(evaluate(c, xs).sizes, kF64, range(-1.0, 1.0));
    for (const Tensor& t : analytic(c, xs, g, all)) expected.push_back(read(t.grad()));
  }
  RunModeScope jit(RunMode::Jit);
  for (int it = 0; it < 4; ++it) {
    const std::vector<Tensor> leaves = analytic(c, xs, g, all);
    for (size_t i = 0; i < leaves.size(); ++i) {
      ASSERT_TRUE(leaves[i].grad().defined()) << "input " << i << " iteration " << it;
      EXPECT_TRUE(all_close(leaves[i].grad(), expected[i], Tol{1e-10, 1e-12}))
          << "input " << i << " iteration " << it << "\n"
          << kiln::tracer::explain().table();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GradcheckJit, ::testing::Range<size_t>(0, grad_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return grad_cases()[info.param].name;
                         });

// ---------------------------------------------------------------- the rule table

// Ops whose result carries no gradient (piecewise constant, integral or without inputs).
const std::set<OpId>& non_differentiable() {
  static const std::set<OpId> ops = {OpId::Eq,          OpId::Ne,
                                     OpId::Lt,          OpId::Le,
                                     OpId::Gt,          OpId::Ge,
                                     OpId::Argmax,      OpId::Empty,
                                     OpId::Full,        OpId::Arange,
                                     OpId::Rand,        OpId::Randn,
                                     OpId::Argsort,     OpId::Topk,
                                     OpId::Multinomial, OpId::Nonzero,
                                     OpId::Attention,   OpId::AttentionBackward,
                                     OpId::LstmLayer,   OpId::LstmBackward,
                                     OpId::AllReduce,   OpId::MaxPool2dBackward};
  return ops;
}

TEST(AutogradRules, EveryOpHasARuleOrIsListedAsNonDifferentiable) {
  for (int i = 0; i < kiln::kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const ag::BackwardRule& rule = ag::backward_rule(op);
    if (non_differentiable().count(op)) {
      EXPECT_EQ(rule.backward, nullptr) << kiln::op_name(op) << " is listed as non-differentiable";
    } else {
      EXPECT_NE(rule.backward, nullptr) << kiln::op_name(op) << " has no backward rule";
      EXPECT_NE(rule.saved, nullptr) << kiln::op_name(op) << " has no saved-inputs rule";
    }
  }
}

// The ops recorded in y's graph.
void collect_ops(const Tensor& y, std::set<OpId>* ops) {
  if (!y.impl()->autograd || !y.impl()->autograd->grad_fn) return;
  std::vector<ag::Node*> stack{y.impl()->autograd->grad_fn.get()};
  std::set<ag::Node*> seen(stack.begin(), stack.end());
  while (!stack.empty()) {
    ag::Node* n = stack.back();
    stack.pop_back();
    if (const auto* op = dynamic_cast<const ag::OpNode*>(n)) ops->insert(op->call().op);
    for (const ag::Edge& e : n->next)
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
}

TEST(AutogradRules, EveryDifferentiableOpIsExercisedByAGradcheckCase) {
  RunModeScope eager(RunMode::Eager);
  std::set<OpId> covered;
  for (const GradCase& c : grad_cases()) {
    std::vector<Tensor> leaves;
    for (const Input& in : c.inputs) leaves.push_back(leaf(random_host(in.sizes, kF64, in.range)));
    collect_ops(c.fn(leaves), &covered);
  }
  for (int i = 0; i < kiln::kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    if (non_differentiable().count(op)) continue;
    EXPECT_TRUE(covered.count(op)) << kiln::op_name(op) << " has no gradcheck case";
  }
}

TEST(AutogradRules, NonDifferentiableResultsDoNotRequireGrad) {
  RunModeScope eager(RunMode::Eager);
  Tensor x = leaf(random_host({3, 4}, kF64));
  EXPECT_FALSE((x > 0).requires_grad());
  EXPECT_FALSE(kiln::eq(x, x).requires_grad());
  EXPECT_FALSE(kiln::argmax(x, 1).requires_grad());
  EXPECT_FALSE(x.to(DType::Int64).requires_grad());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

// ---------------------------------------------------------------- analytic references
// Gradients written out in double loops (not finite differences): a second, independent
// reference for the ops whose rules are the most involved.

class AnalyticGrad : public ::testing::Test {
 protected:
  RunModeScope eager_{RunMode::Eager};
};

TEST_F(AnalyticGrad, SoftmaxAndLogSoftmax) {
  const int64_t rows = 3, cols = 5;
  const Host xh = random_host({rows, cols}, kF64, range(-3, 3));
  const Host gh = random_host({rows, cols}, kF64);
  Host dsoft({rows, cols}), dlog({rows, cols});
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -1e300, z = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xh.at({r, c}));
    for (int64_t c = 0; c < cols; ++c) z += std::exp(xh.at({r, c}) - mx);
    std::vector<double> y(cols);
    for (int64_t c = 0; c < cols; ++c) y[c] = std::exp(xh.at({r, c}) - mx) / z;
    // softmax Jacobian: dy_i/dx_j = y_i (delta_ij - y_j)
    for (int64_t j = 0; j < cols; ++j) {
      double s = 0, l = 0;
      for (int64_t i = 0; i < cols; ++i) {
        s += gh.at({r, i}) * y[i] * ((i == j ? 1.0 : 0.0) - y[j]);
        l += gh.at({r, i}) * ((i == j ? 1.0 : 0.0) - y[j]);  // d log y_i / dx_j
      }
      dsoft.at({r, j}) = s;
      dlog.at({r, j}) = l;
    }
  }
  Tensor x = leaf(xh);
  kiln::softmax(x, 1).backward(make(gh, kF64));
  EXPECT_TRUE(all_close(x.grad(), dsoft, Tol{1e-12, 1e-13}));
  Tensor x2 = leaf(xh);
  kiln::log_softmax(x2, -1).backward(make(gh, kF64));
  EXPECT_TRUE(all_close(x2.grad(), dlog, Tol{1e-12, 1e-13}));
}

TEST_F(AnalyticGrad, LayerNormThroughItsJacobian) {
  const int64_t rows = 6, n = 5;
  const double eps = 1e-5;
  const Host xh = random_host({2, 3, n}, kF64, range(-2, 3));
  const Host wh = random_host({n}, kF64), bh = random_host({n}, kF64);
  const Host gh = random_host({2, 3, n}, kF64);
  Host dx({2, 3, n}), dw({n}), db({n});
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = &xh.v[static_cast<size_t>(r * n)];
    const double* g = &gh.v[static_cast<size_t>(r * n)];
    double mu = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mu += x[i] / static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (x[i] - mu) * (x[i] - mu) / static_cast<double>(n);
    const double sigma = std::sqrt(var + eps);
    std::vector<double> xhat(n);
    for (int64_t i = 0; i < n; ++i) xhat[i] = (x[i] - mu) / sigma;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double jac = ((i == j ? 1.0 : 0.0) - 1.0 / static_cast<double>(n)) / sigma -
                           xhat[i] * xhat[j] / (static_cast<double>(n) * sigma);
        s += g[i] * wh.v[i] * jac;
      }
      dx.v[static_cast<size_t>(r * n + j)] = s;
      dw.v[j] += g[j] * xhat[j];
      db.v[j] += g[j];
    }
  }
  Tensor x = leaf(xh), w = leaf(wh), b = leaf(bh);
  kiln::layer_norm(x, {n}, w, b, eps).backward(make(gh, kF64));
  EXPECT_TRUE(all_close(x.grad(), dx, Tol{1e-10, 1e-11}));
  EXPECT_TRUE(all_close(w.grad(), dw, Tol{1e-10, 1e-11}));
  EXPECT_TRUE(all_close(b.grad(), db, Tol{1e-12, 1e-12}));
}

TEST_F(AnalyticGrad, BatchedBroadcastMatmul) {
  // [2, 1, 3, 4] @ [3, 4, 5] -> [2, 3, 3, 5]
  const Host ah = random_host({2, 1, 3, 4}, kF64), bh = random_host({3, 4, 5}, kF64);
  const Host gh = random_host({2, 3, 3, 5}, kF64);
  Host da({2, 1, 3, 4}), dbh({3, 4, 5});
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t m = 0; m < 3; ++m)
        for (int64_t k = 0; k < 4; ++k)
          for (int64_t j = 0; j < 5; ++j) {
            const double g = gh.at({p, q, m, j});
            da.at({p, 0, m, k}) += g * bh.at({q, k, j});
            dbh.at({q, k, j}) += ah.at({p, 0, m, k}) * g;
          }
  Tensor a = leaf(ah), b = leaf(bh);
  kiln::matmul(a, b).backward(make(gh, kF64));
  EXPECT_TRUE(all_close(a.grad(), da, Tol{1e-12, 1e-12}));
  EXPECT_TRUE(all_close(b.grad(), dbh, Tol{1e-12, 1e-12}));
}

TEST_F(AnalyticGrad, Conv2dDirectLoops) {
  const int64_t n = 2, c = 3, h = 7, w = 6, o = 4, kh = 3, kw = 2, s = 2, p = 1;
  const int64_t oh = (h + 2 * p - kh) / s + 1, ow = (w + 2 * p - kw) / s + 1;
  const Host xh = random_host({n, c, h, w}, kF64), wh = random_host({o, c, kh, kw}, kF64);
  const Host bh = random_host({o}, kF64), gh = random_host({n, o, oh, ow}, kF64);
  Host dx({n, c, h, w}), dw({o, c, kh, kw}), db({o});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t f = 0; f < o; ++f)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          const double g = gh.at({b, f, y, z});
          db.at({f}) += g;
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t r = y * s - p + i, q = z * s - p + j;
                if (r < 0 || r >= h || q < 0 || q >= w) continue;
                dx.at({b, ch, r, q}) += g * wh.at({f, ch, i, j});
                dw.at({f, ch, i, j}) += g * xh.at({b, ch, r, q});
              }
        }
  Tensor x = leaf(xh), wt = leaf(wh), bias = leaf(bh);
  kiln::conv2d(x, wt, bias, {s, s}, {p, p}).backward(make(gh, kF64));
  EXPECT_TRUE(all_close(x.grad(), dx, Tol{1e-12, 1e-12}));
  EXPECT_TRUE(all_close(wt.grad(), dw, Tol{1e-12, 1e-12}));
  EXPECT_TRUE(all_close(bias.grad(), db, Tol{1e-12, 1e-12}));
}

// ---------------------------------------------------------------- engine semantics

class AutogradEngine : public ::testing::Test {
 protected:
  RunModeScope eager_{RunMode::Eager};
};

Host scaled(const Host& h, double k) {
  return map(h, [k](double v) { return v * k; });
}

TEST_F(AutogradEngine, GradientsAccumulateOverBackwardCalls) {
  const Host xh = random_host({3, 4}, kF64);
  Tensor x = leaf(xh);
  kiln::sum(x * x).backward();
  EXPECT_TRUE(all_close(x.grad(), scaled(xh, 2), Tol{1e-14, 0}));
  kiln::sum(x * 3.0).backward();
  EXPECT_TRUE(all_close(x.grad(), map(xh, [](double v) { return 2 * v + 3; }), Tol{1e-14, 1e-14}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  kiln::sum(x).backward();
  EXPECT_TRUE(all_close(x.grad(), map(xh, [](double) { return 1.0; }), tol_exact()));
}

// An in-place write that gives a tensor a history leading back to a node that saved it
// made a reference cycle (tensor -> grad_fn -> ... -> node -> saved tensor) that was
// never freed (found by LeakSanitizer in the Python suite). The saving node now lets go
// of the tensor, and reading it in backward is the usual modified-in-place error.
TEST_F(AutogradEngine, InPlaceWriteAfterASaveLeavesNoCycle) {
  std::weak_ptr<kiln::TensorImpl> y_alive, x_alive;
  {
    Tensor x = make(random_host({4}, kF64), kF64);
    x.set_requires_grad(true);
    x_alive = x.impl_ptr();
    Tensor y = x * 2.0;
    y_alive = y.impl_ptr();
    Tensor z = kiln::exp(y);  // saves y
    y.add_(z);                // y's new history: add_ -> exp -> (saved y)
    EXPECT_THROW(
        {
          try {
            kiln::sum(y).backward();
          } catch (const kiln::Error& e) {
            EXPECT_NE(std::string(e.what()).find("modified by an in-place operation"),
                      std::string::npos)
                << e.what();
            throw;
          }
        },
        kiln::Error);
    // The same write where nothing reads the saved value again works.
    Tensor w = x * 3.0;
    Tensor s = kiln::sin(w);  // saves w
    w.mul_(2.0);
    kiln::sum(w).backward();
    EXPECT_TRUE(all_close(x.grad(), Host({4}, std::vector<double>(4, 6.0)), Tol{1e-12, 1e-12}));
  }
  EXPECT_TRUE(y_alive.expired()) << "a reference cycle keeps y alive";
  EXPECT_TRUE(x_alive.expired()) << "a reference cycle keeps x alive";
}

TEST_F(AutogradEngine, LeavesNeverShareAGradientBuffer) {
  // d(a + b) hands the same gradient to both leaves; accumulating into one of them
  // later must not change the other.
  Tensor a = leaf(random_host({4}, kF64)), b = leaf(random_host({4}, kF64));
  kiln::sum(a + b).backward();
  kiln::sum(a * 3.0).backward();
  const Host ones({4}, {1, 1, 1, 1});
  EXPECT_TRUE(all_close(b.grad(), ones, tol_exact()));
  EXPECT_TRUE(all_close(a.grad(), scaled(ones, 4), tol_exact()));
  // mean hands add a fresh contiguous gradient; a view hands it a view of the caller's.
  Tensor c = leaf(random_host({4}, kF64)), d = leaf(random_host({4}, kF64));
  kiln::mean(c + d).backward();
  kiln::sum(d * 5.0).backward();
  EXPECT_TRUE(all_close(c.grad(), scaled(ones, 0.25), tol_exact()));
  EXPECT_TRUE(all_close(d.grad(), scaled(ones, 5.25), tol_exact()));
  Tensor e = leaf(random_host({4}, kF64)), f = leaf(random_host({4}, kF64));
  const Host gh = random_host({2, 2}, kF64);
  (e + f).view({2, 2}).backward(make(gh, kF64));
  kiln::sum(f * 5.0).backward();
  EXPECT_TRUE(all_close(e.grad(), Host({4}, gh.v), tol_exact()));
  EXPECT_TRUE(
      all_close(f.grad(), Host({4}, map(gh, [](double v) { return v + 5; }).v), tol_exact()));
  // One gradient reaching one leaf directly and another through a view of it.
  Tensor p = leaf(random_host({2, 2}, kF64)), q = leaf(random_host({4}, kF64));
  kiln::mean(p.view({4}) + q).backward();
  kiln::sum(q * 5.0).backward();
  EXPECT_TRUE(all_close(p.grad(), Host({2, 2}, {0.25, 0.25, 0.25, 0.25}), tol_exact()));
  EXPECT_TRUE(all_close(q.grad(), scaled(ones, 5.25), tol_exact()));
}

TEST_F(AutogradEngine, TheUpstreamGradientIsNeverWrittenTo) {
  // Through views and cat the leaves' gradients are slices of the gradient passed to
  // backward(); accumulating into them must not write into the caller's tensor.
  const Host gh = random_host({2, 6}, kF64);
  Tensor g = make(gh, kF64);
  Tensor x = leaf(random_host({3, 4}, kF64));
  Tensor y = x.view({2, 6});
  y.backward(g, /*retain_graph=*/true);
  y.backward(g);
  EXPECT_TRUE(all_close(g, gh, tol_exact())) << "backward wrote into its grad argument";
  EXPECT_TRUE(all_close(x.grad(), Host({3, 4}, scaled(gh, 2).v), tol_exact()));

  Tensor a = leaf(random_host({2, 2}, kF64)), b = leaf(random_host({2, 4}, kF64));
  Tensor c = kiln::cat({a, b}, 1);
  c.backward(g, true);
  c.backward(g, true);
  c.backward(g);
  EXPECT_TRUE(all_close(g, gh, tol_exact())) << "backward wrote into its grad argument";
  Host ga({2, 2}), gb({2, 4});
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t k = 0; k < 6; ++k) (k < 2 ? ga.at({r, k}) : gb.at({r, k - 2})) = 3 * gh.at({r, k});
  EXPECT_TRUE(all_close(a.grad(), ga, tol_exact()));
  EXPECT_TRUE(all_close(b.grad(), gb, tol_exact()));
}

TEST_F(AutogradEngine, NonContiguousUpstreamGradient) {
  const Host xh = random_host({3, 4}, kF64, range(-1, 1)), gh = random_host({3, 4}, kF64);
  for (Layout layout : {Layout::Transposed, Layout::Stepped, Layout::Offset}) {
    SCOPED_TRACE(name(layout));
    Tensor x = leaf(xh);
    Tensor g = make(gh, kF64, layout);
    kiln::exp(x).backward(g);
    EXPECT_TRUE(all_close(
        x.grad(), map2(xh, gh, [](double a, double b) { return std::exp(a) * b; }), Tol{1e-15, 0}));
    Tensor y = leaf(xh);  // the gradient reaches the leaf unchanged (through a view)
    y.view({12}).view({3, 4}).backward(g);
    EXPECT_TRUE(all_close(y.grad(), gh, tol_exact()));
    EXPECT_TRUE(y.grad().is_contiguous());
  }
}

TEST_F(AutogradEngine, RetainGraph) {
  const Host xh = random_host({5}, kF64);
  Tensor x = leaf(xh);
  Tensor loss = kiln::sum(kiln::exp(x));
  loss.backward();
  EXPECT_TRUE(throws<kiln::Error>([&] { loss.backward(); }, {"exp", "retain_graph"}));
  // With retain_graph the second pass works and the gradients add up.
  Tensor z = leaf(xh);
  Tensor loss2 = kiln::sum(kiln::exp(z));
  loss2.backward({}, /*retain_graph=*/true);
  loss2.backward();
  EXPECT_TRUE(
      all_close(z.grad(), map(xh, [](double v) { return 2 * std::exp(v); }), Tol{1e-14, 0}));
}

TEST_F(AutogradEngine, NoGradRecordsNothing) {
  Tensor x = leaf(random_host({3}, kF64));
  {
    ag::NoGradScope no_grad;
    EXPECT_FALSE(ag::grad_enabled());
    Tensor y = kiln::exp(x) * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    EXPECT_EQ(y.grad_fn_name(), "");
    {
      ag::GradModeScope on(true);
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE((x * 2.0).requires_grad());
  }
  EXPECT_TRUE(ag::grad_enabled());
  Tensor y = kiln::exp(x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.grad_fn_name(), "expBackward");
  EXPECT_FALSE((kiln::exp(make(random_host({3}, kF64), kF64))).requires_grad());
}

TEST_F(AutogradEngine, DetachCutsTheGraph) {
  const Host xh = random_host({4}, kF64);
  Tensor x = leaf(xh);
  Tensor h = x * x;
  Tensor d = h.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(all_close(d, map(xh, [](double v) { return v * v; }), tol_exact()));
  kiln::sum(d * x).backward();  // d is a constant: d(loss)/dx = d
  EXPECT_TRUE(all_close(x.grad(), map(xh, [](double v) { return v * v; }), tol_exact()));
  EXPECT_FALSE(d.grad().defined());
}

TEST_F(AutogradEngine, RequiresGradRules) {
  Tensor i = kiln::from_vector<int64_t>({1, 2, 3}, {3});
  EXPECT_TRUE(throws<kiln::DTypeError>([&] { i.set_requires_grad(true); }, {"floating"}));
  Tensor b = kiln::from_vector<bool>({true, false}, {2});
  EXPECT_TRUE(throws<kiln::DTypeError>([&] { b.set_requires_grad(true); }));
  EXPECT_FALSE(i.requires_grad());
  Tensor x = leaf(random_host({3}, kF64));
  Tensor y = x * 2.0;
  EXPECT_TRUE(throws<kiln::Error>([&] { y.set_requires_grad(false); }, {"leaf"}));
  x.set_requires_grad(false);
  EXPECT_FALSE(x.requires_grad());
  EXPECT_FALSE((x * 2.0).requires_grad());
  // backward on something without history, and a non-scalar without a gradient
  EXPECT_TRUE(throws<kiln::Error>([&] { (x * 2.0).backward(); }, {"does not require grad"}));
  Tensor z = leaf(random_host({3}, kF64));
  EXPECT_TRUE(throws<kiln::Error>([&] { (z * 2.0).backward(); }, {"one element"}));
  EXPECT_TRUE(throws<kiln::ShapeError>(
      [&] { (z * 2.0).backward(make(random_host({4}, kF64), kF64)); }, {"shape"}));
}

TEST_F(AutogradEngine, InPlaceOnALeafThatRequiresGradThrows) {
  const Host xh = random_host({3}, kF64);
  Tensor x = leaf(xh);
  EXPECT_TRUE(throws<kiln::Error>([&] { x.add_(1.0); }, {"leaf"}));
  EXPECT_TRUE(throws<kiln::Error>([&] { x.mul_(x); }, {"leaf"}));
  EXPECT_TRUE(all_close(x, xh, tol_exact()));  // nothing was written
  {
    ag::NoGradScope no_grad;  // as optimizers do
    x.add_(1.0);
  }
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(all_close(x, map(xh, [](double v) { return v + 1; }), tol_exact()));
}

TEST_F(AutogradEngine, ModifyingASavedInputInPlaceIsCaughtAtBackward) {
  const Host ah = random_host({4}, kF64), wh = random_host({4}, kF64);
  Tensor a = make(ah, kF64);  // a constant that mul saves for w's gradient
  Tensor w = leaf(wh);
  Tensor loss = kiln::sum(a * w);
  a.add_(1.0);
  EXPECT_TRUE(throws<kiln::Error>([&] { loss.backward(); }, {"mul", "modified by an in-place"}));
  // A non-leaf intermediate written in place after it was saved.
  Tensor h = kiln::exp(w);
  Tensor loss2 = kiln::sum(h * h);
  h.add_(1.0);
  EXPECT_TRUE(throws<kiln::Error>([&] { loss2.backward(); }, {"mul", "in-place"}));
  // The runtime still works afterwards.
  Tensor v = leaf(wh);
  kiln::sum(v * make(ah, kF64)).backward();
  EXPECT_TRUE(all_close(v.grad(), ah, tol_exact()));
  Tensor loss3 = kiln::sum(a * w);
  loss3.backward();
  EXPECT_TRUE(all_close(w.grad(), map(ah, [](double x) { return x + 1; }), tol_exact()));
}

// Views (and detach()) share their base's version counter (runtime/tensor.h), so a write
// through another view of a saved input is seen at backward.
TEST_F(AutogradEngine, ModifyingASavedInputThroughAViewIsCaught) {
  Tensor a = make(random_host({2, 3}, kF64), kF64);
  Tensor w = leaf(random_host({2, 3}, kF64));
  Tensor loss = kiln::sum(a * w);
  a.view({6}).mul_(2.0);  // writes a's storage through another tensor
  EXPECT_TRUE(throws<kiln::Error>([&] { loss.backward(); }, {"mul", "in-place"}));
}

TEST_F(AutogradEngine, InPlaceOpsOnNonLeaves) {
  const Host xh = random_host({3, 4}, kF64), zh = random_host({3, 4}, kF64);
  const Host ch = random_host({3, 4}, kF64);
  Tensor x = leaf(xh), z = leaf(zh);
  Tensor y = x * 2.0;  // a non-leaf
  y.add_(z);
  y.mul_(3.0);
  y.sub_(1.0);
  y.div_(2.0);
  y.add_(4.0);
  EXPECT_EQ(y.grad_fn_name(), "addBackward");
  kiln::sum(y * make(ch, kF64)).backward();
  // y = (3 (2x + z) - 1) / 2 + 4: dy/dx = 3, dy/dz = 1.5
  EXPECT_TRUE(all_close(x.grad(), scaled(ch, 3), Tol{1e-15, 0}));
  EXPECT_TRUE(all_close(z.grad(), scaled(ch, 1.5), Tol{1e-15, 0}));
  // A tensor without history that takes in a value with history.
  Tensor acc = kiln::zeros({3, 4}, kF64);
  Tensor v = leaf(xh);
  acc.add_(v * v);
  acc.mul_(make(ch, kF64));
  EXPECT_TRUE(acc.requires_grad());
  EXPECT_FALSE(acc.is_leaf());
  kiln::sum(acc).backward();
  EXPECT_TRUE(all_close(v.grad(), map2(xh, ch, [](double a, double c) { return 2 * a * c; }),
                        Tol{1e-15, 0}));
  // copy_ of a value with history into a plain tensor.
  Tensor dst = kiln::zeros({3, 4}, kF64);
  Tensor u = leaf(xh);
  dst.copy_(kiln::sin(u));
  kiln::sum(dst).backward();
  EXPECT_TRUE(all_close(u.grad(), map(xh, [](double a) { return std::cos(a); }), Tol{1e-15, 0}));
  // Overwriting a value with history by one without: the result stops requiring grad.
  Tensor q = x * 2.0;
  q.copy_(make(zh, kF64));
  EXPECT_FALSE(q.requires_grad());
  // An op whose gradient needs the value it overwrites is refused (not a wrong grad).
  Tensor r = kiln::exp(x);
  EXPECT_TRUE(throws<kiln::Error>([&] { r.mul_(z); }, {"mul", "overwrites"}));
  EXPECT_TRUE(throws<kiln::Error>([&] { r.relu_(); }, {"overwrites"}));
}

TEST_F(AutogradEngine, RetainGradKeepsANonLeafGradient) {
  const Host xh = random_host({4}, kF64);
  Tensor x = leaf(xh);
  Tensor h = x * 3.0;
  Tensor other = x * 2.0;
  h.retain_grad();
  kiln::sum(h * h + other).backward();
  EXPECT_TRUE(all_close(h.grad(), scaled(xh, 6), Tol{1e-15, 0}));
  EXPECT_FALSE(other.grad().defined());
  EXPECT_TRUE(all_close(x.grad(), map(xh, [](double v) { return 18 * v + 2; }), Tol{1e-14, 0}));
  // A second pass accumulates into the retained gradient too.
  Tensor h2 = x * 1.0;
  h2.retain_grad();
  Tensor l = kiln::sum(h2 * h2);
  l.backward({}, true);
  l.backward();
  EXPECT_TRUE(all_close(h2.grad(), scaled(xh, 4), Tol{1e-15, 0}));
  Tensor plain = make(xh, kF64);
  EXPECT_TRUE(throws<kiln::Error>([&] { plain.retain_grad(); }));
}

TEST_F(AutogradEngine, GradFunctionReturnsGradientsWithoutTouchingLeaves) {
  const Host xh = random_host({3}, kF64), yh = random_host({3}, kF64);
  Tensor x = leaf(xh), y = leaf(yh), unused = leaf(random_host({2}, kF64));
  Tensor h = x * y;
  Tensor loss = kiln::sum(h * x);  // x^2 y
  std::vector<Tensor> g = ag::grad({loss}, {x, y, h}, {}, /*retain_graph=*/true);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_TRUE(
      all_close(g[0], map2(xh, yh, [](double a, double b) { return 2 * a * b; }), Tol{1e-15, 0}));
  EXPECT_TRUE(all_close(g[1], map(xh, [](double a) { return a * a; }), Tol{1e-15, 0}));
  EXPECT_TRUE(all_close(g[2], xh, tol_exact()));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(y.grad().defined());
  EXPECT_TRUE(throws<kiln::Error>(
      [&] {
        ag::grad({loss}, {x, unused}, {}, true);
      },
      {"allow_unused"}));
  std::vector<Tensor> g2 = ag::grad({loss}, {unused, y}, {}, true, /*allow_unused=*/true);
  EXPECT_FALSE(g2[0].defined());
  EXPECT_TRUE(all_close(g2[1], map(xh, [](double a) { return a * a; }), Tol{1e-15, 0}));
  EXPECT_FALSE(unused.grad().defined());
  // An explicit upstream gradient for a non-scalar root.
  const Host uh = random_host({3}, kF64);
  std::vector<Tensor> g3 = ag::grad({h}, {x}, {make(uh, kF64)});
  EXPECT_TRUE(
      all_close(g3[0], map2(uh, yh, [](double u, double b) { return u * b; }), Tol{1e-15, 0}));
  EXPECT_FALSE(x.grad().defined());
}

TEST_F(AutogradEngine, DiamondGraphAccumulatesBothPaths) {
  // x -> a = exp(x) -> {b = sin(a), c = a * a} -> loss = sum(b * c + a)
  const Host xh = random_host({5}, kF64, range(-1, 1));
  Tensor x = leaf(xh);
  Tensor a = kiln::exp(x);
  Tensor loss = kiln::sum(kiln::sin(a) * (a * a) + a);
  loss.backward();
  const Host expected = map(xh, [](double v) {
    const double a = std::exp(v);
    // d/da [sin(a) a^2 + a] = cos(a) a^2 + 2 a sin(a) + 1, times da/dx = a
    return (std::cos(a) * a * a + 2 * a * std::sin(a) + 1) * a;
  });
  EXPECT_TRUE(all_close(x.grad(), expected, Tol{1e-13, 1e-14}));
  // The same leaf on both sides of one op.
  Tensor y = leaf(xh);
  kiln::sum(y * y * y).backward();
  EXPECT_TRUE(all_close(y.grad(), map(xh, [](double v) { return 3 * v * v; }), Tol{1e-14, 1e-15}));
}

TEST_F(AutogradEngine, Float32MatchesFloat64AndGradientsKeepTheLeafDtype) {
  const Host xh = random_host({4, 6}, kF64), wh = random_host({5, 6}, kF64);
  const Host bh = random_host({5}, kF64), gh = random_host({4, 5}, kF64);
  auto net = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return kiln::layer_norm(kiln::gelu(kiln::linear(x, w, b)), {5}) * kiln::sigmoid(b);
  };
  std::vector<Host> ref;
  for (DType d : {kF64, DType::Float32}) {
    Tensor x = leaf(xh, d), w = leaf(wh, d), b = leaf(bh, d);
    net(x, w, b).backward(make(gh, d));
    for (const Tensor& t : {x, w, b}) {
      ASSERT_TRUE(t.grad().defined());
      EXPECT_EQ(t.grad().dtype(), d);
    }
    if (d == kF64) {
      ref = {read(x.grad()), read(w.grad()), read(b.grad())};
    } else {
      EXPECT_TRUE(all_close(x.grad(), ref[0], Tol{1e-4, 1e-5}));
      EXPECT_TRUE(all_close(w.grad(), ref[1], Tol{1e-4, 1e-5}));
      EXPECT_TRUE(all_close(b.grad(), ref[2], Tol{1e-4, 1e-5}));
    }
  }
  // Mixed dtypes: a float32 leaf in a float64 computation gets a float32 gradient.
  Tensor f = leaf(xh, DType::Float32);
  Tensor dbl = leaf(xh, kF64);
  kiln::sum(f * dbl).backward();
  EXPECT_EQ(f.grad().dtype(), DType::Float32);
  EXPECT_EQ(dbl.grad().dtype(), kF64);
  EXPECT_TRUE(all_close(f.grad(), xh, Tol{1e-7, 0}));
}

TEST_F(AutogradEngine, CheckpointGivesTheSameGradients) {
  const uint64_t seed = static_cast<uint64_t>(uniform_int(1, 1 << 30));
  const Host xh = random_host({4, 6}, kF64), ch = random_host({4, 5}, kF64);
  const Host wh = random_host({5, 6}, kF64), vh = random_host({5}, kF64);
  // The segment uses a parameter that is not one of its inputs and draws random numbers.
  auto segment = [](const std::vector<Tensor>& in, const Tensor& w, const Tensor& v) {
    Tensor h = kiln::tanh(kiln::linear(in[0], w, v));
    Tensor noise = kiln::randn(h.sizes(), kF64);
    return std::vector<Tensor>{h * noise + in[1], kiln::sum(h * h)};
  };
  struct Run {
    Host out0, x, c, w, v, after;
  };
  auto run = [&](bool checkpointed) {
    kiln::manual_seed(seed);
    Tensor x = leaf(xh), c = leaf(ch), w = leaf(wh), v = leaf(vh);
    std::vector<Tensor> outs =
        checkpointed ? ag::checkpoint(
                           [&](const std::vector<Tensor>& in) { return segment(in, w, v); }, {x, c})
                     : segment({x, c}, w, v);
    EXPECT_EQ(outs.size(), 2u);
    for (const Tensor& o : outs) EXPECT_TRUE(o.requires_grad());
    Tensor loss = kiln::sum(outs[0] * outs[0]) + outs[1] * 0.5;
    (void)kiln::randn({2}, kF64);  // a random draw between forward and backward
    loss.backward();
    if (checkpointed) {
      EXPECT_EQ(outs[0].grad_fn_name(), "CheckpointBackward");
      EXPECT_TRUE(throws<kiln::Error>([&] { loss.backward(); }, {"retain_graph"}));
    }
    Run r{read(outs[0]),  read(x.grad()), read(c.grad()),
          read(w.grad()), read(v.grad()), read(kiln::randn({3}, kF64))};
    return r;
  };
  const Run plain = run(false);
  const Run ckpt = run(true);
  EXPECT_TRUE(all_close(ckpt.out0, plain.out0, tol_exact()));
  EXPECT_TRUE(all_close(ckpt.x, plain.x, Tol{1e-13, 1e-14}));
  EXPECT_TRUE(all_close(ckpt.c, plain.c, Tol{1e-13, 1e-14}));
  EXPECT_TRUE(all_close(ckpt.w, plain.w, Tol{1e-13, 1e-14}));
  EXPECT_TRUE(all_close(ckpt.v, plain.v, Tol{1e-13, 1e-14}));
  EXPECT_TRUE(all_close(ckpt.after, plain.after, tol_exact())) << "the generator was disturbed";
  // retain_graph: a second pass recomputes the segment again and the gradients add up.
  {
    kiln::manual_seed(seed);
    Tensor x = leaf(xh), c = leaf(ch), w = leaf(wh), v = leaf(vh);
    std::vector<Tensor> outs =
        ag::checkpoint([&](const std::vector<Tensor>& in) { return segment(in, w, v); }, {x, c});
    Tensor loss = kiln::sum(outs[0] * outs[0]) + outs[1] * 0.5;
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();
    EXPECT_TRUE(all_close(x.grad(), scaled(plain.x, 2), Tol{1e-13, 1e-14}));
    EXPECT_TRUE(all_close(w.grad(), scaled(plain.w, 2), Tol{1e-13, 1e-14}));
  }
  // autograd::grad through a checkpoint returns the input's gradient and leaves every
  // leaf's grad() alone, the parameters used inside the segment included.
  {
    kiln::manual_seed(seed);
    Tensor x = leaf(xh), c = leaf(ch), w = leaf(wh), v = leaf(vh);
    std::vector<Tensor> outs =
        ag::checkpoint([&](const std::vector<Tensor>& in) { return segment(in, w, v); }, {x, c});
    Tensor loss = kiln::sum(outs[0] * outs[0]) + outs[1] * 0.5;
    std::vector<Tensor> g = ag::grad({loss}, {x});
    EXPECT_TRUE(all_close(g[0], plain.x, Tol{1e-13, 1e-14}));
    EXPECT_FALSE(x.grad().defined());
    EXPECT_FALSE(w.grad().defined()) << "grad() wrote into a parameter's grad()";
  }
  // Checkpointing under no_grad is a plain call.
  ag::NoGradScope no_grad;
  Tensor x = leaf(xh);
  std::vector<Tensor> outs = ag::checkpoint(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0}; }, {x});
  EXPECT_FALSE(outs[0].requires_grad());
}

// ---------------------------------------------------------------- losses

class Losses : public ::testing::Test {
 protected:
  RunModeScope eager_{RunMode::Eager};
};

double reduce_ref(const std::vector<double>& v, const std::string& reduction, double count) {
  double s = 0;
  for (double x : v) s += x;
  return reduction == "mean" ? s / count : s;
}

TEST_F(Losses, MseLoss) {
  const Host ah = random_host({4, 3}, kF64), bh = random_host({4, 3}, kF64);
  std::vector<double> per(ah.v.size());
  for (size_t i = 0; i < per.size(); ++i) per[i] = (ah.v[i] - bh.v[i]) * (ah.v[i] - bh.v[i]);
  Tensor a = make(ah, kF64), b = make(bh, kF64);
  EXPECT_NEAR(kiln::mse_loss(a, b).item<double>(), reduce_ref(per, "mean", 12), 1e-13);
  EXPECT_NEAR(kiln::mse_loss(a, b, "sum").item<double>(), reduce_ref(per, "sum", 12), 1e-12);
  EXPECT_TRUE(all_close(kiln::mse_loss(a, b, "none"), Host({4, 3}, per), Tol{1e-14, 1e-15}));
  EXPECT_TRUE(throws<kiln::ValueError>([&] { kiln::mse_loss(a, b, "avg"); }, {"reduction"}));
  for (const std::string red : {"mean", "sum", "none"}) {
    check_gradients({"mse_" + red, {{{4, 3}}, {{4, 3}}}, [red](const auto& x) {
                       return kiln::mse_loss(x[0], x[1], red);
                     }});
  }
  check_gradients({"mse_broadcast_target", {{{4, 3}}, {{3}}}, [](const auto& x) {
                     return kiln::mse_loss(x[0], x[1]);
                   }});
}

// -log_softmax(logits)[r, t[r]] per row in double loops (0 for ignored rows).
std::vector<double> cross_entropy_ref(const Host& logits, const std::vector<int64_t>& t,
                                      int64_t ignore_index) {
  const int64_t rows = logits.sizes[0], cols = logits.sizes[1];
  std::vector<double> out(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == ignore_index) continue;
    double mx = -1e300, z = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, logits.at({r, c}));
    for (int64_t c = 0; c < cols; ++c) z += std::exp(logits.at({r, c}) - mx);
    out[r] = -(logits.at({r, t[r]}) - mx - std::log(z));
  }
  return out;
}

TEST_F(Losses, CrossEntropy) {
  const Host lh = random_host({6, 4}, kF64, range(-3, 3));
  struct Targets {
    std::vector<int64_t> t;
    int64_t ignore;
  };
  for (const Targets& tc : {Targets{{0, 3, -100, 1, 2, 3}, -100}, Targets{{0, 2, 1, 2, 3, 0}, 2},
                            Targets{{1, 0, 3, 3, 2, 1}, -100}}) {
    SCOPED_TRACE("ignore_index " + std::to_string(tc.ignore));
    const std::vector<double> per = cross_entropy_ref(lh, tc.t, tc.ignore);
    double valid = 0;
    for (int64_t v : tc.t) valid += v != tc.ignore;
    Tensor logits = make(lh, kF64);
    Tensor target = i64(tc.t, {6});
    EXPECT_NEAR(kiln::cross_entropy(logits, target, "mean", tc.ignore).item<double>(),
                reduce_ref(per, "mean", valid), 1e-13);
    EXPECT_NEAR(kiln::cross_entropy(logits, target, "sum", tc.ignore).item<double>(),
                reduce_ref(per, "sum", valid), 1e-12);
    EXPECT_TRUE(all_close(kiln::cross_entropy(logits, target, "none", tc.ignore), Host({6}, per),
                          Tol{1e-13, 1e-14}));
    for (const std::string red : {"mean", "sum", "none"}) {
      const std::vector<int64_t> t = tc.t;
      const int64_t ignore = tc.ignore;
      check_gradients({"cross_entropy_" + red, {{{6, 4}, range(-3, 3)}}, [=](const auto& x) {
                         return kiln::cross_entropy(x[0], i64(t, {6}), red, ignore);
                       }});
    }
  }
  // int32 targets, and one sample: logits [C] with a 0-d target.
  const std::vector<double> per = cross_entropy_ref(lh, {2, 1, 0, 3, 3, 1}, -100);
  Tensor t32 = kiln::from_vector<int32_t>({2, 1, 0, 3, 3, 1}, {6});
  EXPECT_NEAR(kiln::cross_entropy(make(lh, kF64), t32).item<double>(), reduce_ref(per, "mean", 6),
              1e-13);
  Tensor row = make(lh, kF64).select(0, 1);
  EXPECT_NEAR(kiln::cross_entropy(row, i64({1}, {})).item<double>(), per[1], 1e-13);
  check_gradients({"cross_entropy_1d", {{{4}, range(-3, 3)}}, [](const auto& x) {
                     return kiln::cross_entropy(x[0], i64({2}, {}));
                   }});
}

// Every target ignored: the mean over no targets is nan (PyTorch's), and the gradient 0,
// not 0 * inf (found by the ASan run's random targets in test_losses.py).
TEST_F(Losses, CrossEntropyMeanOverNoTargets) {
  Tensor logits = make(random_host({5, 3}, kF64, range(-3, 3)), kF64);
  logits.set_requires_grad(true);
  const Tensor loss = kiln::cross_entropy(logits, i64({1, 1, 1, 1, 1}, {5}), "mean", 1);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  loss.backward();
  ASSERT_TRUE(logits.grad().defined());
  for (double g : read(logits.grad()).v) EXPECT_EQ(g, 0.0);
}

TEST_F(Losses, BinaryCrossEntropyWithLogits) {
  const Host xh = random_host({3, 5}, kF64, away_from_zero(0.05, -4, 4));
  const Host yh = random_host({3, 5}, kF64, range(0, 1));
  std::vector<double> per(xh.v.size());
  for (size_t i = 0; i < per.size(); ++i) {  // the naive form, from the definition
    const double p = 1 / (1 + std::exp(-xh.v[i]));
    per[i] = -(yh.v[i] * std::log(p) + (1 - yh.v[i]) * std::log(1 - p));
  }
  Tensor x = make(xh, kF64), y = make(yh, kF64);
  EXPECT_NEAR(kiln::binary_cross_entropy_with_logits(x, y).item<double>(),
              reduce_ref(per, "mean", 15), 1e-12);
  EXPECT_NEAR(kiln::binary_cross_entropy_with_logits(x, y, "sum").item<double>(),
              reduce_ref(per, "sum", 15), 1e-11);
  EXPECT_TRUE(all_close(kiln::binary_cross_entropy_with_logits(x, y, "none"), Host({3, 5}, per),
                        Tol{1e-11, 1e-12}));
  for (const std::string red : {"mean", "sum", "none"}) {
    check_gradients(
        {"bce_" + red,
         {{{3, 5}, away_from_zero(0.05, -4, 4)}, {{3, 5}, range(0, 1)}},
         [red](const auto& x) { return kiln::binary_cross_entropy_with_logits(x[0], x[1], red); }});
  }
  // At x == 0 exactly the gradient is sigmoid(0) - y = 0.5 - y (PyTorch's).
  Tensor zero = leaf(Host({2}, {0.0, 0.0}));
  const Host yz({2}, {0.25, 1.0});
  kiln::binary_cross_entropy_with_logits(zero, make(yz, kF64), "sum").backward();
  EXPECT_TRUE(all_close(zero.grad(), Host({2}, {0.25, -0.5}), Tol{1e-15, 0}));
  // d/dx = sigmoid(x) - y (mean: / n), written out.
  Tensor xl = leaf(xh);
  kiln::binary_cross_entropy_with_logits(xl, y).backward();
  EXPECT_TRUE(all_close(
      xl.grad(), map2(xh, yh, [](double a, double b) { return (1 / (1 + std::exp(-a)) - b) / 15; }),
      Tol{1e-12, 1e-14}));
}

// ---------------------------------------------------------------- optimizers
// References: PyTorch's update rules (torch.optim.SGD / Adam / AdamW, single-tensor
// implementation) in plain loops over doubles.

namespace optim = kiln::optim;

struct RefState {
  std::vector<double> p, buf, m, v, vmax;
  bool has_buf = false;
  int64_t t = 0;
};

void sgd_ref(RefState& s, const std::vector<double>& grad, const optim::SGDOptions& o, double lr) {
  for (size_t i = 0; i < s.p.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) g += o.weight_decay * s.p[i];
    if (o.momentum != 0) {
      s.buf[i] = s.has_buf ? o.momentum * s.buf[i] + (1 - o.dampening) * g : g;
      g = o.nesterov ? g + o.momentum * s.buf[i] : s.buf[i];
    }
    s.p[i] -= lr * g;
  }
  s.has_buf = true;
}

void adam_ref(RefState& s, const std::vector<double>& grad, const optim::AdamOptions& o, double lr,
              bool decoupled) {
  ++s.t;
  const double bias1 = 1 - std::pow(o.beta1, static_cast<double>(s.t));
  const double bias2 = 1 - std::pow(o.beta2, static_cast<double>(s.t));
  for (size_t i = 0; i < s.p.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) {
      if (decoupled)
        s.p[i] *= 1 - lr * o.weight_decay;
      else
        g += o.weight_decay * s.p[i];
    }
    s.m[i] = o.beta1 * s.m[i] + (1 - o.beta1) * g;
    s.v[i] = o.beta2 * s.v[i] + (1 - o.beta2) * g * g;
    double v = s.v[i];
    if (o.amsgrad) {
      s.vmax[i] = std::max(s.vmax[i], s.v[i]);
      v = s.vmax[i];
    }
    const double step = lr / bias1;
    const double denom = std::sqrt(v) / std::sqrt(bias2) + o.eps;
    s.p[i] -= step * s.m[i] / denom;
  }
}

enum class Kind { Sgd, Adam, AdamW };

// Five steps on two parameters (the second has no gradient at step 3, so it is
// skipped there); lr changes before step 4. Every parameter is compared after every step.
void check_optimizer(Kind kind, const optim::SGDOptions& so, const optim::AdamOptions& ao, DType d,
                     Tol tol) {
  const std::vector<Dims> shapes = {{3, 4}, {5}};
  std::vector<RefState> ref;
  std::vector<Tensor> params;
  for (const Dims& s : shapes) {
    const Host h = random_host(s, kF64);
    RefState r;
    r.p = h.v;
    r.buf = r.m = r.v = r.vmax = std::vector<double>(h.v.size(), 0.0);
    ref.push_back(r);
    params.push_back(leaf(rounded(h, d), d));
    ref.back().p = rounded(h, d).v;
  }
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == Kind::Sgd) opt = std::make_unique<optim::SGD>(params, so);
  if (kind == Kind::Adam) opt = std::make_unique<optim::Adam>(params, ao);
  if (kind == Kind::AdamW) opt = std::make_unique<optim::AdamW>(params, ao);
  double lr = kind == Kind::Sgd ? so.lr : ao.lr;
  for (int step = 1; step <= 5; ++step) {
    if (step == 4) {
      lr *= 0.5;
      opt->set_lr(lr);
    }
    opt->zero_grad();
    for (size_t k = 0; k < params.size(); ++k) {
      if (k == 1 && step == 3) continue;
      const Host g = rounded(random_host(shapes[k], kF64), d);
      params[k].set_grad(make(g, d));
      if (kind == Kind::Sgd)
        sgd_ref(ref[k], g.v, so, lr);
      else
        adam_ref(ref[k], g.v, ao, lr, kind == Kind::AdamW);
    }
    opt->step();
    for (size_t k = 0; k < params.size(); ++k) {
      EXPECT_TRUE(params[k].is_leaf());
      EXPECT_EQ(params[k].dtype(), d);
      EXPECT_TRUE(all_close(params[k], Host(shapes[k], ref[k].p), tol))
          << "parameter " << k << " after step " << step;
    }
  }
}

class Optimizers : public ::testing::TestWithParam<DType> {
 protected:
  RunModeScope eager_{RunMode::Eager};
  Tol tol() const { return GetParam() == kF64 ? Tol{1e-12, 1e-13} : Tol{2e-5, 2e-6}; }
};

TEST_P(Optimizers, SGD) {
  struct C {
    const char* name;
    optim::SGDOptions o;
  };
  std::vector<C> cases(7);
  cases[0] = {"plain", {}};
  cases[0].o.lr = 0.1;
  cases[1] = {"momentum", {}};
  cases[1].o.lr = 0.05, cases[1].o.momentum = 0.9;
  cases[2] = {"dampening", {}};
  cases[2].o.lr = 0.05, cases[2].o.momentum = 0.8, cases[2].o.dampening = 0.3;
  cases[3] = {"nesterov", {}};
  cases[3].o.lr = 0.05, cases[3].o.momentum = 0.7, cases[3].o.nesterov = true;
  cases[4] = {"weight_decay", {}};
  cases[4].o.lr = 0.1, cases[4].o.momentum = 0.5, cases[4].o.weight_decay = 0.2;
  cases[5] = {"maximize", {}};
  cases[5].o.lr = 0.1, cases[5].o.maximize = true;
  cases[6] = {"everything", {}};
  cases[6].o.lr = 0.03, cases[6].o.momentum = 0.9, cases[6].o.weight_decay = 0.1;
  cases[6].o.nesterov = true, cases[6].o.maximize = true;
  for (const C& c : cases) {
    SCOPED_TRACE(c.name);
    check_optimizer(Kind::Sgd, c.o, {}, GetParam(), tol());
  }
  EXPECT_TRUE(throws<kiln::ValueError>(
      [&] {
        optim::SGDOptions o;
        o.nesterov = true;
        optim::SGD bad({leaf(random_host({2}, kF64))}, o);
      },
      {"Nesterov"}));
}

TEST_P(Optimizers, AdamAndAdamW) {
  struct C {
    const char* name;
    Kind kind;
    optim::AdamOptions o;
  };
  std::vector<C> cases;
  optim::AdamOptions o;
  o.lr = 0.05;
  cases.push_back({"adam", Kind::Adam, o});
  o.weight_decay = 0.1;
  cases.push_back({"adam_weight_decay", Kind::Adam, o});
  o.amsgrad = true;
  cases.push_back({"adam_weight_decay_amsgrad", Kind::Adam, o});
  o.maximize = true;
  o.beta1 = 0.8, o.beta2 = 0.95, o.eps = 1e-6;
  cases.push_back({"adam_everything", Kind::Adam, o});
  optim::AdamOptions w = optim::AdamW::defaults();
  EXPECT_EQ(w.weight_decay, 1e-2);
  w.lr = 0.05;
  cases.push_back({"adamw_defaults", Kind::AdamW, w});
  w.weight_decay = 0.3, w.amsgrad = true;
  cases.push_back({"adamw_amsgrad", Kind::AdamW, w});
  for (const C& c : cases) {
    SCOPED_TRACE(c.name);
    check_optimizer(c.kind, {}, c.o, GetParam(), tol());
  }
}

TEST_P(Optimizers, ZeroGradAndLeafRule) {
  Tensor p = leaf(random_host({3}, kF64), GetParam());
  optim::SGD opt({p}, optim::SGDOptions{});
  kiln::sum(p * 2.0).backward();
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_TRUE(all_close(p.grad(), Host({3}, {0, 0, 0}), tol_exact()));
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE(
      throws<kiln::ValueError>([&] { optim::SGD bad({p * 2.0}, optim::SGDOptions{}); }, {"leaf"}));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Optimizers, ::testing::Values(kF64, DType::Float32), param_name);

// ---------------------------------------------------------------- traced training

struct Training {
  std::vector<double> losses;
  std::vector<Host> weights;
  kiln::tracer::ExplainReport report;
};

// Eight steps of linear-relu-linear + cross_entropy; loss.item() ends each step's trace.
Training train(RunMode mode, DType d, const std::vector<Host>& init, const Host& xh,
               const std::vector<int64_t>& labels, bool adam) {
  RunModeScope scope(mode);
  SyncCompilesScope sync_compiles;  // the caller counts replays of the eight steps
  std::vector<Tensor> params;
  for (const Host& h : init) params.push_back(leaf(h, d));
  std::unique_ptr<optim::Optimizer> opt;
  if (adam) {
    optim::AdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.01;
    opt = std::make_unique<optim::AdamW>(params, o);
  } else {
    optim::SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.nesterov = true;
    opt = std::make_unique<optim::SGD>(params, o);
  }
  const Tensor x = make(xh, d);
  const Tensor target = i64(labels, {static_cast<int64_t>(labels.size())});
  Training out;
  for (int step = 0; step < 8; ++step) {
    Tensor h = kiln::relu(kiln::linear(x, params[0], params[1]));
    Tensor loss = kiln::cross_entropy(kiln::linear(h, params[2], params[3]), target);
    opt->zero_grad();
    loss.backward();
    opt->step();
    out.losses.push_back(loss.item<double>());
  }
  for (const Tensor& p : params) out.weights.push_back(read(p));
  out.report = kiln::tracer::explain();
  return out;
}

class TracedTraining : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(TracedTraining, JitCompiledStepsMatchEagerSteps) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#endif
  const auto [d, adam] = GetParam();
  const int64_t batch = 16, in = 8, hidden = 32, classes = 4;
  std::vector<Host> init = {rounded(random_host({hidden, in}, kF64, range(-0.5, 0.5)), d),
                            rounded(random_host({hidden}, kF64, range(-0.1, 0.1)), d),
                            rounded(random_host({classes, hidden}, kF64, range(-0.3, 0.3)), d),
                            rounded(random_host({classes}, kF64, range(-0.1, 0.1)), d)};
  const Host xh = rounded(random_host({batch, in}, kF64), d);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back(uniform_int(0, classes - 1));

  const Training eager_run = train(RunMode::Eager, d, init, xh, labels, adam);
  const Training traced = train(RunMode::Jit, d, init, xh, labels, adam);
  const Tol tol = d == kF64 ? Tol{1e-9, 1e-11} : Tol{1e-5, 1e-6};
  ASSERT_EQ(traced.losses.size(), eager_run.losses.size());
  for (size_t i = 0; i < traced.losses.size(); ++i) {
    EXPECT_NEAR(traced.losses[i], eager_run.losses[i],
                tol.atol + tol.rtol * std::fabs(eager_run.losses[i]))
        << "step " << i;
  }
  EXPECT_LT(eager_run.losses.back(), eager_run.losses.front()) << "the loop does not learn";
  for (size_t k = 0; k < init.size(); ++k)
    EXPECT_TRUE(all_close(traced.weights[k], eager_run.weights[k], tol)) << "parameter " << k;

  // The step compiled (LLVM) and replayed: the trace holding the forward and backward
  // pass (log_softmax, the matmuls of linear's gradient) replays; side exits do not win.
  const kiln::tracer::ExplainReport& r = traced.report;
  int64_t replays = 0, exits = 0, step_replays = 0;
  for (const auto& t : r.traces) {
    replays += t.replays;
    exits += t.side_exits;
    const bool fwd = std::find(t.ops.begin(), t.ops.end(), "log_softmax") != t.ops.end();
    const bool bwd = std::find(t.ops.begin(), t.ops.end(), "matmul") != t.ops.end();
    if (fwd && bwd && t.backend == "llvm") step_replays += t.replays;
  }
  // Step 1 differs (optimizer state is created), steps 2-3 warm up, 4-8 replay: one
  // trace for the whole step (forward, backward, every parameter's update).
  EXPECT_GE(step_replays, 5) << r.table();
  EXPECT_GE(replays, 5) << r.table();
  EXPECT_EQ(exits, 0) << r.table();
  EXPECT_TRUE(r.recompiles.empty()) << r.table();
  EXPECT_GT(r.ops_replayed, r.ops_recorded / 2) << r.table();
  EXPECT_TRUE(eager_run.report.traces.empty());
}

INSTANTIATE_TEST_SUITE_P(Loops, TracedTraining,
                         ::testing::Combine(::testing::Values(kF64, DType::Float32),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<DType, bool>>& info) {
                           return name(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_adamw" : "_sgd_nesterov");
                         });

}  // namespace
}  // namespace kt
