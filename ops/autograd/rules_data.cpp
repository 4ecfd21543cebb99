// Backward rules of data movement: views (the gradient is reshaped, permuted back,
// summed over expanded dims, or placed into zeros for slices), cat (the gradient is cut
// back into the pieces), index_select (rows summed back with index_add) and
// to_device (the engine moves the gradient back).
#include "ops/api.h"
#include "ops/autograd/rules.h"

namespace kiln::autograd {
namespace {

Tensor zeros_for(const OpNode& n, const Tensor& g) {
  return zeros(n.inputs[0].sizes, TensorOptions(g.dtype(), g.device()));
}

Tensor view_grad(const OpNode& n, const Tensor& g) {
  const OpCall& c = n.call();
  const Dims& in = n.inputs[0].sizes;
  switch (c.op) {
    case OpId::View:
    case OpId::Squeeze:
    case OpId::Unsqueeze:
      return g.reshape(in);
    case OpId::Permute: {
      // attrs.dims is the order as written by the caller: negative dims count from the end.
      const int64_t rank = static_cast<int64_t>(c.attrs.dims.size());
      Dims inverse(c.attrs.dims.size());
      for (int64_t i = 0; i < rank; ++i) {
        const int64_t d = c.attrs.dims[i];
        inverse[d < 0 ? d + rank : d] = i;
      }
      return g.permute(inverse);
    }
    case OpId::Expand:
      return sum_to(g, in);
    case OpId::Slice: {
      Tensor out = zeros_for(n, g);
      out.slice(c.attrs.dim, c.attrs.start, c.attrs.end, c.attrs.step).copy_(g);
      return out;
    }
    case OpId::Select: {
      Tensor out = zeros_for(n, g);
      out.select(c.attrs.dim, c.attrs.start).copy_(g);
      return out;
    }
    default:
      return {};
  }
}

TensorList cat_grad(const OpNode& n, const Tensor& g) {
  const int64_t dim = n.call().attrs.dim;
  TensorList out(n.inputs.size());
  int64_t start = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const int64_t len = n.inputs[i].sizes[dim];
    if (n.next[i].fn) out[i] = g.narrow(dim, start, len);
    start += len;
  }
  return out;
}

// x.index_select(dim, index): rows of g go back to the rows they came from, summed
// where an index repeats (index_add into zeros).
Tensor index_select_grad(const OpNode& n, const Tensor& g) {
  const Dims& in = n.inputs[0].sizes;
  const Tensor index = n.saved(1).reshape({-1});
  if (in.empty()) return sum(g).reshape(in);  // a 0-dim input: its one element, picked once
  return index_add(zeros_for(n, g), n.call().attrs.dim, index, g);
}

}  // namespace

TensorList data_backward(const OpNode& n, const Tensor& g) {
  switch (n.call().info().family) {
    case OpFamily::View:
      return {view_grad(n, g)};
    case OpFamily::Cat:
      return cat_grad(n, g);
    case OpFamily::IndexSelect:
      return {index_select_grad(n, g), Tensor()};
    case OpFamily::ToDevice:
      return {g};  // the engine moves it to the input's device
    default:
      return TensorList(n.call().inputs.size());
  }
}

uint32_t data_saved(const OpCall& c, uint32_t) {
  return c.info().family == OpFamily::IndexSelect ? bit(1) : 0;
}

}  // namespace kiln::autograd
