// Backward rules of the ops along one dim. gather's gradient is scatter_add into zeros;
// scatter's is the output gradient with the overwritten positions zeroed, and gather of
// it for src; scatter_add's and index_add's pass the gradient through and gather (or
// index_select) it for the source. cumsum's is the reversed cumulative sum; prod's is
// the product of the other elements (exclusive products from both sides, so zeros are
// handled exactly); cumprod's is sum_{k>=i} g_k y_k / x_i, exact for nonzero inputs only
// (a zero input gives inf/nan there). argsort and topk (indices) have none.
#include "ops/api.h"
#include "ops/autograd/rules.h"

namespace kiln::autograd {
namespace {

// g, gathered at index, placed into zeros of shape sizes when index is smaller.
Tensor gathered_into(const Tensor& g, int64_t dim, const Tensor& index, const Dims& sizes) {
  const Tensor part = gather(g, dim, index);
  if (part.sizes() == sizes) return part;
  Tensor out = zeros(sizes, TensorOptions(g.dtype(), g.device()));
  Tensor window = out;
  for (int64_t d = 0; d < part.dim(); ++d) window = window.narrow(d, 0, part.size(d));
  window.copy_(part);
  return out;
}

Tensor reverse_cumsum(const Tensor& g, int64_t dim) { return flip(cumsum(flip(g, dim), dim), dim); }

// The product of the elements before each position (1 for the first).
Tensor exclusive_cumprod(const Tensor& x, int64_t dim) {
  const int64_t n = x.size(dim);
  Dims one = x.sizes();
  one[dim] = 1;
  const Tensor ones_slice = ones(one, TensorOptions(x.dtype(), x.device()));
  if (n == 1) return ones_slice;
  return cat({ones_slice, cumprod(x, dim).narrow(dim, 0, n - 1)}, dim);
}

Tensor prod_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Tensor x = n.saved(0);
  if (x.dim() == 0) return g.reshape({});
  const int64_t dim = c.attrs.dim;
  const Tensor ge = expand_reduced(g, x.sizes(), {dim}, c.attrs.keepdim);
  if (x.size(dim) == 0) return zeros(x.sizes(), TensorOptions(g.dtype(), g.device()));
  const Tensor others = exclusive_cumprod(x, dim) * flip(exclusive_cumprod(flip(x, dim), dim), dim);
  return ge * others;
}

}  // namespace

TensorList along_dim_backward(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const int64_t dim = c.attrs.dim;
  TensorList out(c.inputs.size());
  const bool want_x = static_cast<bool>(n.next[0].fn);
  const bool want_src = c.inputs.size() == 3 && n.next[2].fn;
  switch (c.op) {
    case OpId::Gather:
      out[0] = scatter_add(zeros(n.inputs[0].sizes, TensorOptions(g.dtype(), g.device())), dim,
                           n.saved(1), g);
      break;
    case OpId::Scatter:
      if (want_x) out[0] = scatter(g, dim, n.saved(1), Scalar(0));
      if (want_src) out[2] = gathered_into(g, dim, n.saved(1), n.inputs[2].sizes);
      break;
    case OpId::ScatterAdd:
      if (want_x) out[0] = g;
      if (want_src) out[2] = gathered_into(g, dim, n.saved(1), n.inputs[2].sizes);
      break;
    case OpId::IndexAdd:
      if (want_x) out[0] = g;
      if (want_src) {
        const Tensor part = index_select(g, dim, n.saved(1)).reshape(n.inputs[2].sizes);
        out[2] = c.scalars[0] == Scalar(1) ? part : part * c.scalars[0];
      }
      break;
    case OpId::Cumsum:
      out[0] = g.dim() == 0 ? g : reverse_cumsum(g, dim);
      break;
    case OpId::Cumprod: {
      const Tensor x = n.saved(0);
      out[0] = x.dim() == 0 ? g : reverse_cumsum(g * cumprod(x, dim), dim) / x;
      break;
    }
    case OpId::Prod:
      out[0] = prod_grad(n, g);
      break;
    default:
      break;
  }
  return out;
}

uint32_t along_dim_saved(const OpCall& c, uint32_t) {
  switch (c.op) {
    case OpId::Cumsum:
      return 0;
    case OpId::Cumprod:
    case OpId::Prod:
      return bit(0);
    default:
      return bit(1);  // the index
  }
}

}  // namespace kiln::autograd
