// CPU Sort family: argsort and topk along attrs.dim, as int64 indices. Each line
// (outer, inner) is sorted with std::stable_sort, so equal values keep their input
// order (PyTorch's stable=True; also a valid result of stable=False). NaN counts as
// larger than every number (PyTorch's order): last ascending, first descending. Topk
// keeps the first attrs.count positions of the descending (largest) or ascending order.
#include <algorithm>
#include <numeric>
#include <vector>

#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

template <class V>
bool less_nan_last(V a, V b) {
  return !is_nan(a) && (is_nan(b) || a < b);
}

template <class T>
void run_sort(const OpCall& c, const Tensor& out) {
  using V = compute_t<T>;
  const Tensor x = kernel_contiguous(c.inputs[0]);
  const int64_t dim = c.attrs.dim;
  const DimSplit s = split_at_dim(x.sizes(), dim);
  // A 0-dim input keeps its one index whatever k is (PyTorch's topk does the same).
  const int64_t keep = c.op == OpId::Topk && x.dim() > 0 ? c.attrs.count : s.size;
  const bool descending = c.attrs.descending;
  with_output(out, DType::Int64, [&](const Tensor& dst) {
    const T* v = x.data<T>();
    int64_t* y = dst.data<int64_t>();
    parallel_for(0, s.outer * s.inner, 1, [&](int64_t lo, int64_t hi) {
      std::vector<int64_t> order(static_cast<size_t>(s.size));
      std::vector<V> line(static_cast<size_t>(s.size));
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t o = task / s.inner, r = task % s.inner;
        for (int64_t i = 0; i < s.size; ++i)
          line[static_cast<size_t>(i)] = static_cast<V>(v[(o * s.size + i) * s.inner + r]);
        std::iota(order.begin(), order.end(), int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          const V va = line[static_cast<size_t>(a)], vb = line[static_cast<size_t>(b)];
          return descending ? less_nan_last(vb, va) : less_nan_last(va, vb);
        });
        for (int64_t i = 0; i < keep; ++i)
          y[(o * keep + i) * s.inner + r] = order[static_cast<size_t>(i)];
      }
    });
  });
}

}  // namespace

void sort(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(), [&](auto tag) { run_sort<decltype(tag)>(call, out); });
}

}  // namespace kiln::cpu
