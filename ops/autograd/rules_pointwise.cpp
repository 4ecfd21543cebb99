// Backward rules of the pointwise families: Unary (+ Cast), Clamp, Binary, Where.
// Binary gradients are summed back over broadcast dims (sum_to). Rules recompute what
// they need from the saved inputs (exp(x), tanh(x), ...) instead of saving outputs; in
// a traced step the recomputation fuses into the backward kernel.
#include <cmath>

#include "ops/api.h"
#include "ops/autograd/rules.h"

namespace kiln::autograd {
namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

Tensor both(const Tensor& a, const Tensor& b) { return where(a, b, Scalar(false)); }
Tensor sign(const Tensor& x) { return (x > 0).to(x.dtype()) - (x < 0).to(x.dtype()); }

Tensor unary_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  auto x = [&] { return n.saved(0); };
  switch (c.op) {
    case OpId::Neg:
      return -g;
    case OpId::Abs:
      return g * sign(x());
    case OpId::Exp:
      return g * exp(x());
    case OpId::Log:
      return g / x();
    case OpId::Sqrt:
      return g * 0.5 / sqrt(x());
    case OpId::Rsqrt:
      return g * -0.5 * rsqrt(x()) / x();
    case OpId::Sin:
      return g * cos(x());
    case OpId::Cos:
      return -(g * sin(x()));
    case OpId::Tanh: {
      const Tensor t = tanh(x());
      return g * (1 - t * t);
    }
    case OpId::Sigmoid: {
      const Tensor s = sigmoid(x());
      return g * s * (1 - s);
    }
    case OpId::Relu:
      return g * (x() > 0);
    case OpId::Gelu: {
      const Tensor v = x();
      if (c.attrs.approximate_tanh) {
        constexpr double k = 0.79788456080286535588, a = 0.044715;
        const Tensor v2 = v * v;
        const Tensor t = tanh(k * v * (1 + a * v2));
        return g * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * (k * (1 + 3 * a * v2)));
      }
      const Tensor cdf = 0.5 * (1 + erf(v * kSqrtHalf));
      return g * (cdf + v * exp(-0.5 * v * v) * kInvSqrt2Pi);
    }
    case OpId::Silu: {
      const Tensor v = x(), s = sigmoid(v);
      return g * s * (1 + v * (1 - s));
    }
    case OpId::Log1p:
      return g / (x() + 1);
    case OpId::Erf: {
      const Tensor v = x();
      return g * (2 * kInvSqrt2Pi * std::sqrt(2.0)) * exp(-(v * v));
    }
    case OpId::Reciprocal: {
      const Tensor r = reciprocal(x());
      return -(g * r * r);
    }
    case OpId::Cast:
      return g;  // the engine converts it to the input's dtype
    default:
      return {};
  }
}

Tensor clamp_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Tensor x = n.saved(0);
  Tensor pass;
  size_t k = 0;
  if (c.attrs.has_min) pass = x >= c.scalars[k++];
  if (c.attrs.has_max) pass = pass.defined() ? both(pass, x <= c.scalars[k]) : x <= c.scalars[k];
  return pass.defined() ? where(pass, g, Scalar(0.0)) : g;
}

// d(a op b)/da and /db for a tensor pair, the unused side left undefined.
TensorList binary_pair(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const uint32_t want = (n.next[0].fn ? 1u : 0u) | (n.next[1].fn ? 2u : 0u);
  auto a = [&] { return n.saved(0); };
  auto b = [&] { return n.saved(1); };
  Tensor ga, gb;
  switch (c.op) {
    case OpId::Add:
      ga = g, gb = g;
      break;
    case OpId::Sub:
      ga = g;
      if (want & 2) gb = -g;
      break;
    case OpId::Mul:
      if (want & 1) ga = g * b();
      if (want & 2) gb = g * a();
      break;
    case OpId::Div:
      if (want & 1) ga = g / b();
      if (want & 2) {
        const Tensor bv = b();
        gb = -(g * a() / (bv * bv));
      }
      break;
    case OpId::Pow: {
      const Tensor av = a(), bv = b();
      if (want & 1) ga = where(bv == 0, Scalar(0.0), g * bv * pow(av, bv - 1));
      if (want & 2) gb = where(both(av == 0, bv >= 0), Scalar(0.0), g * pow(av, bv) * log(av));
      break;
    }
    case OpId::Maximum:
    case OpId::Minimum: {
      const Tensor av = a(), bv = b();
      const bool max = c.op == OpId::Maximum;
      const Tensor tie = (av == bv).to(g.dtype()) * 0.5;
      if (want & 1) ga = g * ((max ? av > bv : av < bv).to(g.dtype()) + tie);
      if (want & 2) gb = g * ((max ? bv > av : bv < av).to(g.dtype()) + tie);
      break;
    }
    default:
      break;
  }
  TensorList out(2);
  if ((want & 1) && ga.defined()) out[0] = sum_to(ga, n.inputs[0].sizes);
  if ((want & 2) && gb.defined()) out[1] = sum_to(gb, n.inputs[1].sizes);
  return out;
}

// d(x op s)/dx (or d(s op x)/dx with scalar_first) for a tensor and a scalar.
Tensor binary_scalar(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Scalar& s = c.scalars[0];
  const bool first = c.attrs.scalar_first;
  const double sv = s.to_double();
  switch (c.op) {
    case OpId::Add:
      return g;
    case OpId::Sub:
      return first ? -g : g;
    case OpId::Mul:
      return g * s;
    case OpId::Div: {
      if (!first) return g / s;
      const Tensor x = n.saved(0);
      return -(g * s / (x * x));
    }
    case OpId::Pow: {
      const Tensor x = n.saved(0);
      if (!first) return sv == 0 ? g * 0 : g * s * pow(x, Scalar(sv - 1));
      const Tensor grad = g * pow(s, x) * std::log(sv);
      return sv == 0 ? where(x >= 0, Scalar(0.0), grad) : grad;
    }
    case OpId::Maximum:
    case OpId::Minimum: {
      const Tensor x = n.saved(0);
      const Tensor wins = c.op == OpId::Maximum ? x > s : x < s;
      return g * (wins.to(g.dtype()) + (x == s).to(g.dtype()) * 0.5);
    }
    default:
      return {};
  }
}

}  // namespace

TensorList pointwise_backward(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  switch (c.info().family) {
    case OpFamily::Unary:
      return {unary_grad(n, g)};
    case OpFamily::Clamp:
      return {clamp_grad(n, g)};
    case OpFamily::Binary:
      if (c.inputs.size() == 1) return {binary_scalar(n, g)};
      return binary_pair(n, g);
    case OpFamily::Where: {
      const Tensor cond = n.saved(0);
      TensorList out(3);
      if (n.next[1].fn) out[1] = sum_to(where(cond, g, Scalar(0.0)), n.inputs[1].sizes);
      if (n.next[2].fn) out[2] = sum_to(where(cond, Scalar(0.0), g), n.inputs[2].sizes);
      return out;
    }
    default:
      return TensorList(c.inputs.size());
  }
}

uint32_t pointwise_saved(const OpCall& c, uint32_t needs) {
  switch (c.info().family) {
    case OpFamily::Unary:
      return c.op == OpId::Neg || c.op == OpId::Cast ? 0 : bit(0);
    case OpFamily::Clamp:
      return bit(0);
    case OpFamily::Where:
      return bit(0);
    case OpFamily::Binary:
      if (c.inputs.size() == 1) {
        const bool reads_x = c.op == OpId::Pow || c.op == OpId::Maximum || c.op == OpId::Minimum ||
                             (c.op == OpId::Div && c.attrs.scalar_first);
        return reads_x ? bit(0) : 0;
      }
      switch (c.op) {
        case OpId::Add:
        case OpId::Sub:
          return 0;
        case OpId::Mul:
          return ((needs & bit(0)) ? bit(1) : 0) | ((needs & bit(1)) ? bit(0) : 0);
        case OpId::Div:
          return bit(1) | ((needs & bit(1)) ? bit(0) : 0);
        default:
          return bit(0) | bit(1);
      }
    default:
      return 0;
  }
}

}  // namespace kiln::autograd
