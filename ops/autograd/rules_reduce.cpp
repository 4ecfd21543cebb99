// Backward rules of reductions (sum, mean, amax/amin, var, logsumexp), softmax / log_softmax and
// layer_norm. Max/min split the gradient evenly between tied maxima (PyTorch's amax).
#include "ops/api.h"
#include "ops/autograd/rules.h"

namespace kiln::autograd {
namespace {

int64_t reduced_count(const Dims& sizes, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

Tensor reduction_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Dims& sizes = n.inputs[0].sizes;
  const Dims& dims = c.attrs.dims;
  const Tensor ge = expand_reduced(g, sizes, dims, c.attrs.keepdim);
  switch (c.op) {
    case OpId::Sum:
      return ge;
    case OpId::Mean:
      return ge / static_cast<double>(reduced_count(sizes, dims));
    case OpId::Max:
    case OpId::Min: {
      const Tensor x = n.saved(0);
      const Tensor best = c.op == OpId::Max ? amax(x, dims, true) : amin(x, dims, true);
      const Tensor hit = (x == best).to(g.dtype());
      return ge * hit / sum(hit, dims, true);
    }
    case OpId::Var: {
      const Tensor x = n.saved(0);
      const double denom = static_cast<double>(reduced_count(sizes, dims) - c.attrs.correction);
      return ge * (x - mean(x, dims, true)) * (2.0 / denom);
    }
    case OpId::LogSumExp: {
      const Tensor x = n.saved(0);
      return ge * exp(x - logsumexp(x, dims, true));
    }
    default:
      return {};
  }
}

Tensor softmax_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Tensor y = softmax(n.saved(0), c.attrs.dim);
  if (c.op == OpId::Softmax) return y * (g - sum(g * y, {c.attrs.dim}, true));
  return g - y * sum(g, {c.attrs.dim}, true);  // log_softmax
}

TensorList layer_norm_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Tensor x = n.saved(0);
  const int64_t k = static_cast<int64_t>(c.attrs.dims.size());
  Dims axes, batch;
  for (int64_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? batch : axes).push_back(d);
  const Tensor mu = mean(x, axes, true);
  const Tensor rstd = rsqrt(var(x, axes, 0, true) + c.scalars[0]);
  const Tensor xhat = (x - mu) * rstd;
  const bool has_weight = c.inputs.size() > 1;
  TensorList out(c.inputs.size());
  if (n.next[0].fn) {
    const Tensor gw = has_weight ? g * n.saved(1) : g;
    out[0] = rstd * (gw - mean(gw, axes, true) - xhat * mean(gw * xhat, axes, true));
  }
  auto over_batch = [&](const Tensor& t) { return batch.empty() ? t : sum(t, batch); };
  if (has_weight && n.next[1].fn) out[1] = over_batch(g * xhat);
  if (c.inputs.size() > 2 && n.next[2].fn) out[2] = over_batch(g);
  return out;
}

}  // namespace

TensorList reduce_backward(const OpNode& n, const Tensor& g) {
  switch (n.call().info().family) {
    case OpFamily::Reduce:
      return {reduction_grad(n, g)};
    case OpFamily::Softmax:
      return {softmax_grad(n, g)};
    case OpFamily::LayerNorm:
      return layer_norm_grad(n, g);
    default:
      return TensorList(n.call().inputs.size());
  }
}

uint32_t reduce_saved(const OpCall& c, uint32_t needs) {
  switch (c.op) {
    case OpId::Sum:
    case OpId::Mean:
      return 0;
    case OpId::LayerNorm:
      return bit(0) | ((needs & bit(0)) && c.inputs.size() > 1 ? bit(1) : 0);
    default:
      return bit(0);
  }
}

}  // namespace kiln::autograd
