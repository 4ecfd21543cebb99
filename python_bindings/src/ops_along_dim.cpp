// Module-level functions of the ops along one dim (ops/api_along_dim.cpp): gather,
// scatter (tensor src; _scatter_value for a number), scatter_add, index_add, sort and
// topk (as (values, indices) tuples), argsort, cumsum, cumprod, prod. kiln/_along_dim.py
// adds PyTorch's keyword forms, named results and the Tensor methods.
#include "common.h"

namespace kiln::python {
namespace {

using T = const Tensor&;

bp::tuple sort_fn(T x, int64_t dim, bool descending, bool stable) {
  const SortResult r = kiln::sort(x, dim, descending, stable);
  return bp::make_tuple(r.values, r.indices);
}

bp::tuple topk_fn(T x, int64_t k, int64_t dim, bool largest, bool sorted) {
  const SortResult r = kiln::topk(x, k, dim, largest, sorted);
  return bp::make_tuple(r.values, r.indices);
}

Tensor prod_fn(T x, const bp::object& dim, bool keepdim) {
  if (dim.is_none()) return kiln::prod(x);
  return kiln::prod(x, bp::extract<int64_t>(dim)(), keepdim);
}

}  // namespace

void register_along_dim_ops() {
  bp::def(
      "gather", +[](T x, int64_t dim, T index) { return kiln::gather(x, dim, index); },
      (bp::arg("input"), bp::arg("dim"), bp::arg("index")));
  bp::def(
      "scatter",
      +[](T x, int64_t dim, T index, T src) { return kiln::scatter(x, dim, index, src); },
      (bp::arg("input"), bp::arg("dim"), bp::arg("index"), bp::arg("src")));
  bp::def(
      "_scatter_value",
      +[](T x, int64_t dim, T index, const Scalar& value) {
        return kiln::scatter(x, dim, index, value);
      },
      (bp::arg("input"), bp::arg("dim"), bp::arg("index"), bp::arg("value")));
  bp::def(
      "scatter_add",
      +[](T x, int64_t dim, T index, T src) { return kiln::scatter_add(x, dim, index, src); },
      (bp::arg("input"), bp::arg("dim"), bp::arg("index"), bp::arg("src")));
  bp::def(
      "index_add",
      +[](T x, int64_t dim, T index, T source, const Scalar& alpha) {
        return kiln::index_add(x, dim, index, source, alpha);
      },
      (bp::arg("input"), bp::arg("dim"), bp::arg("index"), bp::arg("source"),
       bp::arg("alpha") = 1));
  bp::def("sort", &sort_fn,
          (bp::arg("input"), bp::arg("dim") = -1, bp::arg("descending") = false,
           bp::arg("stable") = false));
  bp::def(
      "argsort",
      +[](T x, int64_t dim, bool descending, bool stable) {
        return kiln::argsort(x, dim, descending, stable);
      },
      (bp::arg("input"), bp::arg("dim") = -1, bp::arg("descending") = false,
       bp::arg("stable") = false));
  bp::def("topk", &topk_fn,
          (bp::arg("input"), bp::arg("k"), bp::arg("dim") = -1, bp::arg("largest") = true,
           bp::arg("sorted") = true));
  bp::def(
      "cumsum", +[](T x, int64_t dim) { return kiln::cumsum(x, dim); },
      (bp::arg("input"), bp::arg("dim")));
  bp::def(
      "cumprod", +[](T x, int64_t dim) { return kiln::cumprod(x, dim); },
      (bp::arg("input"), bp::arg("dim")));
  bp::def("prod", &prod_fn,
          (bp::arg("input"), bp::arg("dim") = bp::object(), bp::arg("keepdim") = false));
}

}  // namespace kiln::python
