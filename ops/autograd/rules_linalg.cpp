// Backward rules of matmul, linear, conv2d, the pools and im2col / col2im. Convolution
// and pooling gradients go through im2col / col2im (ops.def): a conv's weight gradient
// is grad @ columns^T, its input gradient col2im(weight^T @ grad); max pooling sends
// each window's gradient to the first maximum (on the CPU one max_pool2d_backward op;
// elsewhere argmax over the window's column).
#include <limits>

#include "ops/api.h"
#include "ops/autograd/rules.h"

namespace kiln::autograd {
namespace {

TensorList matmul_grad(const OpNode& n, const Tensor& g) {
  // Promote 1-D operands to matrices (as the forward did), then undo it.
  const bool a_vec = n.inputs[0].sizes.size() == 1, b_vec = n.inputs[1].sizes.size() == 1;
  auto matrix = [&](int i) {
    const Tensor t = n.saved(static_cast<size_t>(i));
    return i == 0 ? (a_vec ? t.unsqueeze(0) : t) : (b_vec ? t.unsqueeze(1) : t);
  };
  auto matrix_sizes = [&](int i) {
    Dims s = n.inputs[static_cast<size_t>(i)].sizes;
    if (s.size() == 1) s.insert(i == 0 ? s.begin() : s.end(), 1);
    return s;
  };
  Tensor g2 = g;
  if (a_vec) g2 = g2.unsqueeze(b_vec ? 0 : -2);
  if (b_vec) g2 = g2.unsqueeze(-1);
  TensorList out(2);
  if (n.next[0].fn) {
    const Tensor ga = sum_to(matmul(g2, matrix(1).transpose(-1, -2)), matrix_sizes(0));
    out[0] = ga.reshape(n.inputs[0].sizes);
  }
  if (n.next[1].fn) {
    const Tensor gb = sum_to(matmul(matrix(0).transpose(-1, -2), g2), matrix_sizes(1));
    out[1] = gb.reshape(n.inputs[1].sizes);
  }
  return out;
}

// y = x @ w^T + bias with x [..., in], w [out, in].
TensorList linear_grad(const OpNode& n, const Tensor& g) {
  const Dims& xs = n.inputs[0].sizes;
  const int64_t out_features = n.inputs[1].sizes[0];
  const int64_t in_features = n.inputs[1].sizes[1];
  const Tensor g2 = g.reshape({-1, out_features});
  TensorList out(n.call().inputs.size());
  if (n.next[0].fn) out[0] = matmul(g, n.saved(1)).reshape(xs);
  if (n.next[1].fn) out[1] = matmul(g2.t(), n.saved(0).reshape({-1, in_features}));
  if (out.size() > 2 && n.next[2].fn) out[2] = sum(g2, {0});
  return out;
}

std::array<int64_t, 2> pair(const int64_t v[2]) { return {v[0], v[1]}; }

// Treats a 3-D [C, H, W] input as a batch of one.
Tensor as_batch(const Tensor& t) { return t.dim() == 3 ? t.unsqueeze(0) : t; }

TensorList conv2d_grad(const OpNode& n, const Tensor& g) {
  const OpAttrs& a = n.call().attrs;
  const Dims& ws = n.inputs[1].sizes;  // [O, C, kH, kW]
  const Dims& xs = n.inputs[0].sizes;
  const Tensor g4 = as_batch(g);
  const int64_t batch = g4.size(0), o = ws[0];
  const Tensor gcol = g4.reshape({batch, o, -1});  // [N, O, L]
  const std::array<int64_t, 2> kernel{ws[2], ws[3]};
  TensorList out(n.call().inputs.size());
  if (n.next[0].fn) {
    const Tensor w2 = n.saved(1).reshape({o, -1});  // [O, C*kH*kW]
    const Tensor cols = matmul(w2.t(), gcol);       // [N, C*kH*kW, L]
    const Dims hw{xs[xs.size() - 2], xs[xs.size() - 1]};
    out[0] = col2im(cols, hw, kernel, pair(a.stride), pair(a.padding)).reshape(xs);
  }
  if (n.next[1].fn) {
    const Tensor cols = im2col(as_batch(n.saved(0)), kernel, pair(a.stride), pair(a.padding), 0.0);
    out[1] = sum(matmul(gcol, cols.transpose(1, 2)), {0}).reshape(ws);
  }
  if (out.size() > 2 && n.next[2].fn) out[2] = sum(g4, {0, 2, 3});
  return out;
}

TensorList pool_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Dims& xs = n.inputs[0].sizes;
  const int64_t h = xs[xs.size() - 2], w = xs[xs.size() - 1];
  const int64_t planes = n.inputs[0].sizes.size() == 4 ? xs[0] * xs[1] : xs[0];
  const std::array<int64_t, 2> kernel = pair(c.attrs.kernel);
  const int64_t window = kernel[0] * kernel[1];
  const Tensor gcol = g.reshape({planes, 1, -1});  // [planes, 1, L]
  if (c.op == OpId::MaxPool2d && g.device().is_cpu()) {
    // One pass (ops/cpu/pool2d.cpp) instead of im2col, argmax, where and col2im: on the
    // bench CNN's [32, 64, 24, 24] 2x2 pool, 2.1 ms of those four ops a step.
    const Tensor x = n.saved(0);
    return {max_pool2d_backward(g.to(x.dtype()), x, kernel, pair(c.attrs.stride),
                                pair(c.attrs.padding))};
  }
  Tensor cols;
  if (c.op == OpId::AvgPool2d) {
    const int64_t l = gcol.size(2);
    cols = (gcol / static_cast<double>(window)).expand({planes, window, l});
  } else {
    const Tensor x = n.saved(0).reshape({planes, 1, h, w});
    const Tensor patches = im2col(x, kernel, pair(c.attrs.stride), pair(c.attrs.padding),
                                  -std::numeric_limits<double>::infinity());
    const Tensor first_max = argmax(patches, 1, true);  // [planes, 1, L]
    const Tensor slot = arange(window, TensorOptions(DType::Int64, g.device())).view({1, -1, 1});
    cols = where(slot == first_max, gcol, Scalar(0.0));
  }
  const Tensor gx = col2im(cols, {h, w}, kernel, pair(c.attrs.stride), pair(c.attrs.padding));
  return {gx.reshape(xs)};
}

TensorList unfold_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const std::array<int64_t, 2> kernel = pair(c.attrs.kernel);
  if (c.op == OpId::Im2Col) {
    const Dims& xs = n.inputs[0].sizes;
    return {col2im(g, {xs[2], xs[3]}, kernel, pair(c.attrs.stride), pair(c.attrs.padding))};
  }
  return {im2col(g, kernel, pair(c.attrs.stride), pair(c.attrs.padding), 0.0)};
}

}  // namespace

TensorList linalg_backward(const OpNode& n, const Tensor& g) {
  switch (n.call().info().family) {
    case OpFamily::Matmul:
      return matmul_grad(n, g);
    case OpFamily::Linear:
      return linear_grad(n, g);
    case OpFamily::Conv2d:
      return conv2d_grad(n, g);
    case OpFamily::Pool2d:
      return pool_grad(n, g);
    case OpFamily::Unfold:
      return unfold_grad(n, g);
    default:
      return TensorList(n.call().inputs.size());
  }
}

uint32_t linalg_saved(const OpCall& c, uint32_t needs) {
  switch (c.info().family) {
    case OpFamily::Matmul:
    case OpFamily::Linear:
    case OpFamily::Conv2d:
      return ((needs & bit(0)) ? bit(1) : 0) | ((needs & bit(1)) ? bit(0) : 0);
    case OpFamily::Pool2d:
      return c.op == OpId::MaxPool2d ? bit(0) : 0;
    default:
      return 0;
  }
}

}  // namespace kiln::autograd
