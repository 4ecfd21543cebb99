// CPU LayerNorm over the last len(attrs.dims) dims of x:
//   y = (x - mean) / sqrt(var + eps) * weight + bias   (biased variance, eps = scalars[0])
// weight is present iff there are at least 2 inputs, bias iff there are 3. 16-bit
// inputs compute in float, float64 in double; mean and variance accumulate in double
// over two passes. One task per group of rows, each row normalized independently.
#include <cmath>
#include <type_traits>

#include "ops/cpu/kernel_io.h"
#include "ops/cpu/reduce_accumulators.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

template <class C>
struct RowAffine {
  const C* weight = nullptr;  // null: 1
  const C* bias = nullptr;    // null: 0
};

template <class C, class Out>
void normalize_row(const C* x, int64_t n, double eps, const RowAffine<C>& affine, Out* y) {
  const double mean = reduce_span(SumAccumulator<C>{}, x, n) / static_cast<double>(n);
  const double variance =
      reduce_span(SquaredDeviationAccumulator<C>{mean}, x, n) / static_cast<double>(n);
  const C scale = static_cast<C>(1.0 / std::sqrt(variance + eps));
  const C shift = static_cast<C>(mean);
  for (int64_t i = 0; i < n; ++i) {
    C v = (x[i] - shift) * scale;
    if (affine.weight) v *= affine.weight[i];
    if (affine.bias) v += affine.bias[i];
    y[i] = to_element<Out>(v);
  }
}

template <class Out>
void layer_norm_typed(const OpCall& call, const Tensor& dst) {
  using C = compute_t<Out>;
  const Tensor x = kernel_contiguous(call.inputs[0], dtype_of<C>());
  const int64_t n = dims_numel(call.attrs.dims);
  const int64_t rows = x.numel() / n;
  Tensor weight, bias;
  RowAffine<C> affine;
  if (call.inputs.size() >= 2 && call.inputs[1].defined()) {
    weight = kernel_contiguous(call.inputs[1], dtype_of<C>());
    affine.weight = weight.data<C>();
  }
  if (call.inputs.size() >= 3 && call.inputs[2].defined()) {
    bias = kernel_contiguous(call.inputs[2], dtype_of<C>());
    affine.bias = bias.data<C>();
  }
  const double eps = call.scalars.empty() ? 1e-5 : call.scalars[0].to_double();
  const C* xp = x.data<C>();
  Out* y = dst.data<Out>();
  parallel_for(0, rows, rows_per_task(n), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) normalize_row(xp + r * n, n, eps, affine, y + r * n);
  });
}

}  // namespace

void layer_norm(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const DType result = to_floating(call.inputs[0].dtype());
  with_output(out, result, [&](const Tensor& dst) {
    visit_dtype(result, [&](auto tag) {
      using Out = decltype(tag);
      if constexpr (std::is_floating_point_v<compute_t<Out>>) layer_norm_typed<Out>(call, dst);
    });
  });
}

}  // namespace kiln::cpu
