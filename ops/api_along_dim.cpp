// The public functions of the ops along one dim (ops/api.h): gather, scatter,
// scatter_add, index_add, sort, argsort, topk, cumsum, cumprod, prod. Each wraps dim
// (a 0-dim input counts as rank 1) and dispatches; sort and topk get their values by
// gathering the input at the sorted indices, so the values carry gather's gradient.
#include "ops/api.h"
#include "ops/dispatch.h"
#include "runtime/error.h"

namespace kiln {
namespace {

Tensor along(OpId op, TensorList inputs, int64_t dim, ScalarList scalars = {}, OpAttrs a = {}) {
  KILN_CHECK(inputs[0].defined(), ValueError, "[", op_name(op), "] input is undefined");
  a.dim = wrap_dim(dim, std::max<int64_t>(inputs[0].dim(), 1), op_name(op));
  return dispatch(OpCall{op, std::move(inputs), std::move(scalars), std::move(a)});
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return along(OpId::Gather, {x, index}, dim);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return along(OpId::Scatter, {x, index, src}, dim);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  return along(OpId::Scatter, {x, index}, dim, {value});
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return along(OpId::ScatterAdd, {x, index, src}, dim);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                 const Scalar& alpha) {
  return along(OpId::IndexAdd, {x, index, src}, dim, {alpha});
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  OpAttrs a;
  a.descending = descending;
  a.stable = stable;
  return along(OpId::Argsort, {x}, dim, {}, a);
}

SortResult sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  Tensor indices = argsort(x, dim, descending, stable);
  return {gather(x, dim, indices), indices};
}

SortResult topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  (void)sorted;  // the result is always sorted (a valid answer for sorted=false too)
  OpAttrs a;
  a.descending = largest;
  a.stable = true;
  a.count = k;
  Tensor indices = along(OpId::Topk, {x}, dim, {}, a);
  return {gather(x, dim, indices), indices};
}

Tensor cumsum(const Tensor& x, int64_t dim) { return along(OpId::Cumsum, {x}, dim); }

Tensor cumprod(const Tensor& x, int64_t dim) { return along(OpId::Cumprod, {x}, dim); }

Tensor prod(const Tensor& x) {
  KILN_CHECK(x.defined(), ValueError, "[prod] input is undefined");
  return prod(x.reshape({-1}), 0);
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  OpAttrs a;
  a.keepdim = keepdim;
  return along(OpId::Prod, {x}, dim, {}, a);
}

Tensor flip(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.defined(), ValueError, "[flip] input is undefined");
  if (x.dim() == 0) return x;
  const int64_t d = wrap_dim(dim, x.dim(), "flip");
  const int64_t n = x.size(d);
  if (n <= 1) return x;
  return index_select(x, d, arange(n - 1, -1, -1, TensorOptions(DType::Int64, x.device())));
}

}  // namespace kiln
