// CPU Softmax and LogSoftmax over attrs.dim, numerically stable (the maximum is
// subtracted before exp). Integer and 16-bit inputs compute in float, float64 in
// double; the exp sum accumulates in double. The input is read as a contiguous
// [outer, n, inner] block: for the usual last-dim case (inner == 1) each row is one
// task: float32 and float64 rows go through the vector row kernel of ops/cpu/simd.h
// (one pass for the maximum, one for exp and its sum, one to scale), 16-bit outputs
// through a per-thread buffer; otherwise blocks of neighbouring columns are processed
// together. A row holding a NaN gives NaNs, like PyTorch.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "ops/cpu/kernel_io.h"
#include "ops/cpu/reduce_accumulators.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

enum class SoftmaxKind { Softmax, LogSoftmax };

// values[i] = exp(values[i]) with the vectorized pointwise kernel when there is one.
template <class C>
void exp_in_place(C* values, int64_t n) {
  if (const auto vector_exp = simd::table<C>().unary[static_cast<int>(OpId::Exp)]) {
    vector_exp(values, values, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) values[i] = std::exp(values[i]);
}

template <class C, class Out>
void softmax_row(const C* x, int64_t n, SoftmaxKind kind, C* scratch, Out* y) {
  const C max = reduce_span(ExtremeAccumulator<C, true>{}, x, n);
  for (int64_t i = 0; i < n; ++i) scratch[i] = x[i] - max;
  exp_in_place(scratch, n);
  const double sum = reduce_span(SumAccumulator<C>{}, scratch, n);
  if (kind == SoftmaxKind::Softmax) {
    const C scale = static_cast<C>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) y[i] = to_element<Out>(scratch[i] * scale);
  } else {
    const C shift = max + static_cast<C>(std::log(sum));
    for (int64_t i = 0; i < n; ++i) y[i] = to_element<Out>(x[i] - shift);
  }
}

// Columns [first, first + width) of one [n, inner] slab.
template <class C, class Out>
void softmax_columns(const C* x, int64_t n, int64_t inner, int64_t width, SoftmaxKind kind,
                     Out* y) {
  C max[kColumnBlock];
  double sum[kColumnBlock];
  reduce_columns(ExtremeAccumulator<C, true>{}, x, n, inner, width, max);
  std::fill(sum, sum + width, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const C* row = x + r * inner;
    for (int64_t w = 0; w < width; ++w) sum[w] += static_cast<double>(std::exp(row[w] - max[w]));
  }
  for (int64_t r = 0; r < n; ++r) {
    const C* row = x + r * inner;
    Out* dst = y + r * inner;
    for (int64_t w = 0; w < width; ++w) {
      if (kind == SoftmaxKind::Softmax) {
        dst[w] = to_element<Out>(static_cast<double>(std::exp(row[w] - max[w])) / sum[w]);
      } else {
        dst[w] = to_element<Out>(row[w] - max[w] - static_cast<C>(std::log(sum[w])));
      }
    }
  }
}

template <class Out>
void softmax_typed(const Tensor& input, int64_t dim, SoftmaxKind kind, const Tensor& dst) {
  using C = compute_t<Out>;
  const Tensor packed = kernel_contiguous(input, dtype_of<C>());
  const DimSplit s = split_at_dim(packed.sizes(), dim);
  const C* x = packed.data<C>();
  Out* y = dst.data<Out>();
  const auto vector_row = simd::table<C>().softmax_row;
  if (s.inner == 1 && vector_row && std::is_same_v<C, Out>) {
    parallel_for(0, s.outer, rows_per_task(s.size), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o)
        vector_row(x + o * s.size, reinterpret_cast<C*>(y) + o * s.size, s.size,
                   kind == SoftmaxKind::LogSoftmax);
    });
    return;
  }
  if (s.inner == 1) {
    parallel_for(0, s.outer, rows_per_task(s.size), [&](int64_t lo, int64_t hi) {
      std::vector<C> scratch(static_cast<size_t>(s.size));
      for (int64_t o = lo; o < hi; ++o)
        softmax_row(x + o * s.size, s.size, kind, scratch.data(), y + o * s.size);
    });
    return;
  }
  const int64_t blocks = (s.inner + kColumnBlock - 1) / kColumnBlock;
  parallel_for(0, s.outer * blocks, rows_per_task(s.size * kColumnBlock),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t task = lo; task < hi; ++task) {
                   const int64_t o = task / blocks, first = (task % blocks) * kColumnBlock;
                   const int64_t offset = o * s.size * s.inner + first;
                   softmax_columns(x + offset, s.size, s.inner,
                                   std::min(kColumnBlock, s.inner - first), kind, y + offset);
                 }
               });
}

}  // namespace

void softmax(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const Tensor& x = call.inputs[0];
  const SoftmaxKind kind =
      call.op == OpId::LogSoftmax ? SoftmaxKind::LogSoftmax : SoftmaxKind::Softmax;
  const DType result = to_floating(x.dtype());
  const int64_t dim = x.dim() == 0 ? 0 : call.attrs.dim;
  with_output(out, result, [&](const Tensor& dst) {
    visit_dtype(result, [&](auto tag) {
      using Out = decltype(tag);
      if constexpr (std::is_floating_point_v<compute_t<Out>>) softmax_typed<Out>(x, dim, kind, dst);
    });
  });
}

}  // namespace kiln::cpu
