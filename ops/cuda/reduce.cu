// Reductions: sum, mean, max, min, argmax, var, logsumexp over attrs.dims (sorted, unique; every
// dim when the user named none), keepdim or not.
//
// Strategy: view x with the kept dims first and the reduced dims last (a permuted view of
// the same storage), pack it (a copy only when that view is not already dense; mean and
// var also convert to their floating output dtype there), and run the row-reduction
// engine (ops/cuda/reduce.cuh) over [kept numel, reduced numel]. A dense x whose reduced
// dims all lie outside its kept dims (sum over the batch dim) needs no permuting copy: the
// column kernel reads it as [reduced numel, kept numel]. The output's row-major order is
// the kept dims' order, with or without keepdim's 1s.
//
// Accumulators: float for float16/bfloat16/float32, double for float64, int64 for the
// integer and bool sums (-> int64). Var is Welford per thread merged with Chan's formula,
// divided by max(0, n - correction). Max/min propagate NaN; argmax returns the first index
// of the maximum (a NaN counts as the maximum, like PyTorch).
#include <algorithm>
#include <limits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/reduce.cuh"
#include "ops/pointwise_math.h"
#include "ops/reduce_math.h"

namespace kiln::cuda_impl {
namespace {

template <class In, class Acc, class Out>
struct SumOp {
  using acc_t = Acc;
  Acc scale;  // 1 for sum, 1/count for mean
  bool mean;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc reduce(Acc a, In v, int64_t) const { return a + convert<Acc>(v); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ Out project(Acc a) const { return convert<Out>(mean ? a * scale : a); }
};

template <class T, bool IsMax>
struct ExtremumOp {
  using C = compute_t<T>;
  using acc_t = C;
  __device__ C identity() const {
    if constexpr (std::is_floating_point_v<C>)
      return IsMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else
      return IsMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  __device__ C reduce(C a, T v, int64_t) const { return combine(a, widen(v)); }
  __device__ C combine(C a, C b) const { return IsMax ? pm::max(a, b) : pm::min(a, b); }
  __device__ T project(C a) const { return convert<T>(a); }
};

template <class C>
struct ArgAcc {
  C value;
  int64_t index;  // -1: nothing seen yet
};

template <class T>
struct ArgmaxOp {
  using C = compute_t<T>;
  using acc_t = ArgAcc<C>;
  __device__ acc_t identity() const { return acc_t{C(0), -1}; }
  __device__ acc_t reduce(acc_t a, T v, int64_t c) const { return combine(a, acc_t{widen(v), c}); }
  __device__ acc_t combine(acc_t a, acc_t b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool an = is_nan(a.value), bn = is_nan(b.value);
    if (an || bn) {
      if (an && bn) return a.index <= b.index ? a : b;
      return an ? a : b;
    }
    if (a.value > b.value) return a;
    if (b.value > a.value) return b;
    return a.index <= b.index ? a : b;
  }
  __device__ int64_t project(acc_t a) const { return a.index < 0 ? 0 : a.index; }
};

template <class C>
struct WelfordAcc {
  C mean, m2;
  int64_t n;
};

template <class T>
struct VarOp {
  using C = compute_t<T>;
  using acc_t = WelfordAcc<C>;
  C correction;
  __device__ acc_t identity() const { return acc_t{C(0), C(0), 0}; }
  __device__ acc_t reduce(acc_t a, T v, int64_t) const {
    const C x = widen(v);
    a.n += 1;
    const C d = x - a.mean;
    a.mean += d / static_cast<C>(a.n);
    a.m2 += d * (x - a.mean);
    return a;
  }
  __device__ acc_t combine(acc_t a, acc_t b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const C d = b.mean - a.mean;
    const C fb = static_cast<C>(b.n) / static_cast<C>(n);
    return acc_t{a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<C>(a.n) * fb, n};
  }
  __device__ T project(acc_t a) const {
    C div = static_cast<C>(a.n) - correction;
    if (div < C(0)) div = C(0);
    return convert<T>(a.m2 / div);
  }
};

template <class T>
struct LogSumExpOp {  // ops/reduce_math.h's accumulator in compute_t<T>
  using C = compute_t<T>;
  using F = pm::LogSumExp<C>;
  using acc_t = typename F::Acc;
  __device__ acc_t identity() const { return F::identity(); }
  __device__ acc_t reduce(acc_t a, T v, int64_t) const { return F::add(a, widen(v)); }
  __device__ acc_t combine(acc_t a, acc_t b) const { return F::combine(a, b); }
  __device__ T project(acc_t a) const { return convert<T>(F::finish(a)); }
};

template <class T>
using SumAcc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, int64_t>;

// The input as a packed 2-D problem: rows = kept elements, cols = reduced elements.
// Row layout: x is [rows, cols] (reduced dims innermost). Column layout: x is [cols, rows]
// (x was already dense with every reduced dim outside every kept dim: no copy needed).
struct Rows {
  Tensor x;
  int64_t rows, cols;
  bool columns;
};

Rows pack_rows(const Tensor& x, const Dims& dims, DType dtype) {
  Dims sizes, strides, red_sizes, red_strides;
  int64_t rows = 1, cols = 1;
  bool kept_seen = false, reduced_outside = true;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    (reduced ? red_sizes : sizes).push_back(x.size(d));
    (reduced ? red_strides : strides).push_back(x.stride(d));
    (reduced ? cols : rows) *= x.size(d);
    if (x.size(d) == 1) continue;
    if (!reduced)
      kept_seen = true;
    else if (kept_seen)
      reduced_outside = false;
  }
  if (x.is_contiguous() && reduced_outside && rows > 1 && cols > 1) {
    return Rows{packed(x, dtype), rows, cols, true};
  }
  sizes.insert(sizes.end(), red_sizes.begin(), red_sizes.end());
  strides.insert(strides.end(), red_strides.begin(), red_strides.end());
  Tensor view = Tensor::make_view(x.storage(), sizes, strides, x.storage_offset(), x.dtype());
  return Rows{packed(view, dtype), rows, cols, false};
}

template <class In, class Out, class Op>
void run(const Rows& r, const Tensor& out, const Op& op, const char* name) {
  with_packed_out(out, dtype_of<Out>(), name, [&](const Tensor& o) {
    const In* x = static_cast<const In*>(r.x.data_ptr());
    Out* y = static_cast<Out*>(o.data_ptr());
    if (r.columns)
      launch_reduce_columns<Op, In, Out>(x, r.rows, r.cols, y, op, o.device().index, name);
    else
      launch_reduce<Op, In, Out>(x, r.rows, r.cols, y, op, o.device().index, name);
  });
}

template <class F>
void visit_numeric(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::Int32:
      f(int32_t{});
      return;
    case DType::Int64:
      f(int64_t{});
      return;
    case DType::Bool:
      break;
    default:
      visit_floating(d, op, f);
      return;
  }
  throw DTypeError(detail::cat("[", op, "] the CUDA kernel does not support dtype bool"));
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void reduce(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  const Tensor& x = call.inputs[0];
  const char* name = call.name();
  const Dims& dims = call.attrs.dims;
  switch (call.op) {
    case OpId::Sum: {
      const Rows r = pack_rows(x, dims, x.dtype());
      auto go = [&](auto tag) {
        using T = decltype(tag);
        using Acc = SumAcc<T>;
        using Out = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, int64_t>;
        run<T, Out>(r, out, SumOp<T, Acc, Out>{Acc(1), false}, name);
      };
      if (x.dtype() == DType::Bool)
        go(bool{});
      else
        visit_numeric(x.dtype(), name, go);
      return;
    }
    case OpId::Mean: {
      const Rows r = pack_rows(x, dims, out.dtype());
      visit_floating(out.dtype(), name, [&](auto tag) {
        using T = decltype(tag);
        using Acc = compute_t<T>;
        const Acc scale =
            r.cols > 0 ? Acc(1) / static_cast<Acc>(r.cols) : std::numeric_limits<Acc>::quiet_NaN();
        run<T, T>(r, out, SumOp<T, Acc, T>{scale, true}, name);
      });
      return;
    }
    case OpId::Max:
    case OpId::Min: {
      const Rows r = pack_rows(x, dims, x.dtype());
      visit_numeric(x.dtype(), name, [&](auto tag) {
        using T = decltype(tag);
        if (call.op == OpId::Max)
          run<T, T>(r, out, ExtremumOp<T, true>{}, name);
        else
          run<T, T>(r, out, ExtremumOp<T, false>{}, name);
      });
      return;
    }
    case OpId::Argmax: {
      const Rows r = pack_rows(x, dims, x.dtype());
      visit_numeric(x.dtype(), name, [&](auto tag) {
        using T = decltype(tag);
        run<T, int64_t>(r, out, ArgmaxOp<T>{}, name);
      });
      return;
    }
    case OpId::Var: {
      const Rows r = pack_rows(x, dims, out.dtype());
      visit_floating(out.dtype(), name, [&](auto tag) {
        using T = decltype(tag);
        using C = compute_t<T>;
        run<T, T>(r, out, VarOp<T>{static_cast<C>(call.attrs.correction)}, name);
      });
      return;
    }
    case OpId::LogSumExp: {
      const Rows r = pack_rows(x, dims, out.dtype());
      visit_floating(out.dtype(), name, [&](auto tag) {
        run<decltype(tag), decltype(tag)>(r, out, LogSumExpOp<decltype(tag)>{}, name);
      });
      return;
    }
    default:
      break;
  }
  throw Error(detail::cat("[", name, "] internal: not a reduction"));
}

}  // namespace kiln::cuda
