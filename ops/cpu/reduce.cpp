// CPU reductions: Sum, Mean, Max, Min, Argmax, Var, LogSumExp over attrs.dims.
//
// The input is first brought to a contiguous [outer, reduced, inner] layout
// (ops/cpu/reduce_layout.h), then each op runs one of two loop shapes: rows (inner
// == 1, each output reads one contiguous run) or columns (inner > 1, vectorized across
// neighbouring outputs). Float sums, means and variances accumulate in double;
// integer and bool sums in int64. Max/Min propagate NaN; Argmax returns the first
// index of the maximum, NaN counting as the maximum. Var divides by
// max(N - correction, 0), so too few elements give inf or nan like PyTorch.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/cpu/kernel_io.h"
#include "ops/cpu/reduce_accumulators.h"
#include "ops/cpu/reduce_layout.h"
#include "ops/kernels.h"
#include "ops/reduce_math.h"

namespace kiln::cpu {
namespace {

// Floating inputs keep their dtype in Mean/Var; integer and bool inputs give float32.
template <class T>
using FloatingOut = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, float>;

template <class T>
void run_sum(const T* x, const ReduceLayout& l, const Tensor& out) {
  using P = SumAccumulator<T>;
  using Out = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, int64_t>;
  with_output(out, dtype_of<Out>(), [&](const Tensor& dst) {
    reduce_layout_with(P{}, x, l.outer, l.reduced, l.inner, dst.data<Out>(),
                       [](typename P::Acc acc) { return to_element<Out>(acc); });
  });
}

template <class T>
void run_mean(const T* x, const ReduceLayout& l, const Tensor& out) {
  using P = SumAccumulator<T>;
  using Out = FloatingOut<T>;
  const double count = static_cast<double>(l.reduced);
  with_output(out, dtype_of<Out>(), [&](const Tensor& dst) {
    reduce_layout_with(
        P{}, x, l.outer, l.reduced, l.inner, dst.data<Out>(),
        [count](typename P::Acc acc) { return to_element<Out>(static_cast<double>(acc) / count); });
  });
}

template <class T, bool kMax>
void run_extreme(const T* x, const ReduceLayout& l, const Tensor& out) {
  using P = ExtremeAccumulator<T, kMax>;
  with_output(out, dtype_of<T>(), [&](const Tensor& dst) {
    reduce_layout_with(P{}, x, l.outer, l.reduced, l.inner, dst.data<T>(),
                       [](typename P::Acc acc) { return to_element<T>(acc); });
  });
}

// ---- LogSumExp: one pass with ops/reduce_math.h's accumulator, in double.

template <class T>
struct LogSumExpAccumulator {
  using F = pm::LogSumExp<double>;
  using Acc = F::Acc;
  static constexpr int64_t kLanes = 4;
  static Acc identity() { return F::identity(); }
  static Acc add(Acc acc, T v) { return F::add(acc, static_cast<double>(v)); }
  static Acc combine(Acc a, Acc b) { return F::combine(a, b); }
};

template <class T>
void run_logsumexp(const T* x, const ReduceLayout& l, const Tensor& out) {
  using P = LogSumExpAccumulator<T>;
  using Out = FloatingOut<T>;
  with_output(out, dtype_of<Out>(), [&](const Tensor& dst) {
    reduce_layout_with(P{}, x, l.outer, l.reduced, l.inner, dst.data<Out>(),
                       [](typename P::Acc acc) { return to_element<Out>(P::F::finish(acc)); });
  });
}

// ---- Var: mean first, then the sum of squared deviations, both in double.

double variance_divisor(int64_t count, int64_t correction) {
  return static_cast<double>(std::max<int64_t>(count - correction, 0));
}

template <class T>
double squared_deviation_of_run(const T* p, int64_t n, bool split) {
  using Sum = SumAccumulator<T>;
  const double sum =
      static_cast<double>(split ? reduce_span_parallel(Sum{}, p, n) : reduce_span(Sum{}, p, n));
  const SquaredDeviationAccumulator<T> deviation{sum / static_cast<double>(n)};
  return split ? reduce_span_parallel(deviation, p, n) : reduce_span(deviation, p, n);
}

template <class T>
void var_columns(const T* x, int64_t reduced, int64_t inner, int64_t width, double divisor,
                 FloatingOut<T>* out) {
  using Sum = SumAccumulator<T>;
  typename Sum::Acc sums[kColumnBlock];
  double mean[kColumnBlock], squares[kColumnBlock];
  reduce_columns(Sum{}, x, reduced, inner, width, sums);
  for (int64_t w = 0; w < width; ++w) {
    mean[w] = static_cast<double>(sums[w]) / static_cast<double>(reduced);
    squares[w] = 0.0;
  }
  for (int64_t r = 0; r < reduced; ++r) {
    const T* row = x + r * inner;
    for (int64_t w = 0; w < width; ++w) {
      const double d = static_cast<double>(row[w]) - mean[w];
      squares[w] += d * d;
    }
  }
  for (int64_t w = 0; w < width; ++w) out[w] = to_element<FloatingOut<T>>(squares[w] / divisor);
}

template <class T>
void run_var(const T* x, const ReduceLayout& l, int64_t correction, const Tensor& out) {
  using Out = FloatingOut<T>;
  const double divisor = variance_divisor(l.reduced, correction);
  with_output(out, dtype_of<Out>(), [&](const Tensor& dst) {
    Out* y = dst.data<Out>();
    if (l.reduced == 0) {
      std::fill(y, y + l.outer * l.inner,
                to_element<Out>(std::numeric_limits<double>::quiet_NaN()));
      return;
    }
    auto row_variance = [&](int64_t o, bool split) {
      y[o] =
          to_element<Out>(squared_deviation_of_run(x + o * l.reduced, l.reduced, split) / divisor);
    };
    if (l.inner == 1) {
      if (split_rows_across_threads(l.outer, l.reduced)) {
        for (int64_t o = 0; o < l.outer; ++o) row_variance(o, true);
        return;
      }
      parallel_for(0, l.outer, rows_per_task(l.reduced), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) row_variance(o, false);
      });
      return;
    }
    const int64_t blocks = (l.inner + kColumnBlock - 1) / kColumnBlock;
    parallel_for(
        0, l.outer * blocks, rows_per_task(l.reduced * kColumnBlock), [&](int64_t lo, int64_t hi) {
          for (int64_t task = lo; task < hi; ++task) {
            const int64_t o = task / blocks, first = (task % blocks) * kColumnBlock;
            var_columns(x + o * l.reduced * l.inner + first, l.reduced, l.inner,
                        std::min(kColumnBlock, l.inner - first), divisor, y + o * l.inner + first);
          }
        });
  });
}

// ---- Argmax: first index of the maximum; a NaN beats every number and the first NaN wins.

template <class C>
bool beats(C candidate, C best) {
  return candidate > best || (is_nan(candidate) && !is_nan(best));
}

// Two passes over the run: the vectorized NaN-propagating maximum, then the first
// position holding it (a scan that stops there).
template <class T>
int64_t argmax_of_run(const T* p, int64_t n, bool split) {
  using C = compute_t<T>;
  using Max = ExtremeAccumulator<T, true>;
  const C best = split ? reduce_span_parallel(Max{}, p, n) : reduce_span(Max{}, p, n);
  const bool want_nan = is_nan(best);
  for (int64_t i = 0; i < n; ++i) {
    const C v = static_cast<C>(p[i]);
    if (want_nan ? is_nan(v) : v == best) return i;
  }
  return 0;
}

template <class T>
void argmax_columns(const T* x, int64_t reduced, int64_t inner, int64_t width, int64_t* out) {
  using C = compute_t<T>;
  C best[kColumnBlock];
  for (int64_t w = 0; w < width; ++w) {
    best[w] = static_cast<C>(x[w]);
    out[w] = 0;
  }
  for (int64_t r = 1; r < reduced; ++r) {
    const T* row = x + r * inner;
    for (int64_t w = 0; w < width; ++w) {
      const C v = static_cast<C>(row[w]);
      if (beats(v, best[w])) {
        best[w] = v;
        out[w] = r;
      }
    }
  }
}

template <class T>
void run_argmax(const T* x, const ReduceLayout& l, const Tensor& out) {
  assert(l.reduced > 0);
  with_output(out, DType::Int64, [&](const Tensor& dst) {
    int64_t* y = dst.data<int64_t>();
    if (l.inner == 1) {
      if (split_rows_across_threads(l.outer, l.reduced)) {
        for (int64_t o = 0; o < l.outer; ++o)
          y[o] = argmax_of_run(x + o * l.reduced, l.reduced, true);
        return;
      }
      parallel_for(0, l.outer, rows_per_task(l.reduced), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) y[o] = argmax_of_run(x + o * l.reduced, l.reduced, false);
      });
      return;
    }
    const int64_t blocks = (l.inner + kColumnBlock - 1) / kColumnBlock;
    parallel_for(
        0, l.outer * blocks, rows_per_task(l.reduced * kColumnBlock), [&](int64_t lo, int64_t hi) {
          for (int64_t task = lo; task < hi; ++task) {
            const int64_t o = task / blocks, first = (task % blocks) * kColumnBlock;
            argmax_columns(x + o * l.reduced * l.inner + first, l.reduced, l.inner,
                           std::min(kColumnBlock, l.inner - first), y + o * l.inner + first);
          }
        });
  });
}

}  // namespace

void reduce(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const ReduceInput input =
      prepare_reduce_input(call.inputs[0], call.attrs.dims, call.op == OpId::Argmax);
  const ReduceLayout& layout = input.layout;
  visit_dtype(input.data.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = input.data.data<T>();
    switch (call.op) {
      case OpId::Sum:
        run_sum(x, layout, out);
        break;
      case OpId::Mean:
        run_mean(x, layout, out);
        break;
      case OpId::Max:
        run_extreme<T, true>(x, layout, out);
        break;
      case OpId::Min:
        run_extreme<T, false>(x, layout, out);
        break;
      case OpId::Argmax:
        run_argmax(x, layout, out);
        break;
      case OpId::Var:
        run_var(x, layout, call.attrs.correction, out);
        break;
      case OpId::LogSumExp:
        run_logsumexp(x, layout, out);
        break;
      default:
        assert(false && "reduce: not a reduction op");
    }
  });
}

}  // namespace kiln::cpu
