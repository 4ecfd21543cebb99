// softmax / log_softmax over attrs.dim, computed in compute_t<out's element type> (float
// for 16-bit floats) after converting x to out's dtype.
//
// x is packed and seen as [outer, D, inner]. inner == 1 (the usual last-dim case): one
// warp or block per row (ops/cuda/rowwise.cuh); rows of up to 8192 elements are kept in
// registers (one read: max, sum of exp, write), longer ones take an online max/sum-of-exp
// pass (a running (max, sum) pair per thread, merged across threads) and a write pass. inner
// > 1 with enough (outer, inner) columns to fill the device: one thread per column, the
// same two passes strided by inner (coalesced across threads). Otherwise the softmax dim
// is moved last by a transposing copy, the row kernel runs, and the result is copied back.
// Stable: exp(x - max); a NaN in a row makes the row NaN; an all -inf row gives NaN like
// PyTorch.
#include <limits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/rowwise.cuh"
#include "ops/pointwise_math.h"

namespace kiln::cuda_impl {
namespace {

template <class C>
struct MaxSum {
  C max, sum;
};

template <class C>
__device__ __forceinline__ void online_add(MaxSum<C>& a, C v) {
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  if (v > a.max) {  // false for NaN
    a.sum = (a.max == kNegInf ? C(0) : a.sum * pm::exp(a.max - v)) + C(1);
    a.max = v;
  } else if (v != v) {
    a.max = v;
    a.sum = v;
  } else if (v != kNegInf) {
    a.sum += pm::exp(v - a.max);  // a.max NaN keeps the sum NaN
  }
}

struct MergeMaxSum {
  template <class C>
  __device__ MaxSum<C> operator()(MaxSum<C> a, MaxSum<C> b) const {
    constexpr C kNegInf = -std::numeric_limits<C>::infinity();
    if (a.max != a.max) return a;
    if (b.max != b.max) return b;
    const C m = a.max > b.max ? a.max : b.max;
    if (m == kNegInf) return MaxSum<C>{m, a.sum + b.sum};
    const C sa = a.max == kNegInf ? C(0) : a.sum * pm::exp(a.max - m);
    const C sb = b.max == kNegInf ? C(0) : b.sum * pm::exp(b.max - m);
    return MaxSum<C>{m, sa + sb};
  }
};

template <class C>
__device__ __forceinline__ C finish(C v, MaxSum<C> ms, bool log) {
  return log ? v - ms.max - pm::log(ms.sum) : pm::exp(v - ms.max) / ms.sum;
}

template <bool WarpPerRow, class T>
__global__ void __launch_bounds__(kBlockRowThreads)
    softmax_rows_kernel(const T* x, T* out, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  using G = RowGroup<WarpPerRow>;
  __shared__ MaxSum<C> scratch[kWarp];
  const int64_t row = G::row();
  const bool active = row < rows;
  MaxSum<C> ms{-std::numeric_limits<C>::infinity(), C(0)};
  const T* p = x + row * cols;
  if (active) {
    for (int64_t c = G::lane(); c < cols; c += G::size()) online_add(ms, widen(p[c]));
  }
  ms = G::allreduce(ms, MergeMaxSum{}, scratch);
  if (!active) return;
  T* q = out + row * cols;
  for (int64_t c = G::lane(); c < cols; c += G::size())
    q[c] = convert<T>(finish(widen(p[c]), ms, log));
}

struct MaxOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return pm::max(a, b);
  }
};
struct SumOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
};

// The row in registers (ops/cuda/rowwise.cuh): one read, max, sum of exp, one write.
template <bool WarpPerRow, int PerThread, bool Log, class T>
__global__ void __launch_bounds__(1024)
    softmax_rows_cached_kernel(const T* x, T* out, int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  using G = RowGroup<WarpPerRow>;
  __shared__ C scratch[kWarp];
  const int64_t row = G::row();
  const bool active = row < rows;
  const T* p = x + row * cols;
  const int lane = G::lane(), size = G::size();
  C v[PerThread];
  C m = -std::numeric_limits<C>::infinity();
#pragma unroll
  for (int j = 0; j < PerThread; ++j) {
    const int64_t c = lane + static_cast<int64_t>(j) * size;
    v[j] = active && c < cols ? widen(p[c]) : -std::numeric_limits<C>::infinity();
    m = pm::max(m, v[j]);
  }
  m = G::allreduce(m, MaxOp{}, scratch);
  C s = C(0);
#pragma unroll
  for (int j = 0; j < PerThread; ++j) {
    if (lane + static_cast<int64_t>(j) * size < cols) {
      const C e = pm::exp(v[j] - m);
      s += e;
      if constexpr (!Log) v[j] = e;
    }
  }
  s = G::allreduce(s, SumOp{}, scratch);
  if (!active) return;
  T* q = out + row * cols;
  const C inv = C(1) / s, log_s = Log ? pm::log(s) : C(0);
#pragma unroll
  for (int j = 0; j < PerThread; ++j) {
    const int64_t c = lane + static_cast<int64_t>(j) * size;
    if (c < cols) q[c] = convert<T>(Log ? v[j] - m - log_s : v[j] * inv);
  }
}

template <class T>
__global__ void softmax_columns_kernel(const T* x, T* out, int64_t outer, int64_t d, int64_t inner,
                                       bool log) {
  using C = compute_t<T>;
  const int64_t n = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t o = i / inner, r = i - o * inner;
    const T* p = x + o * d * inner + r;
    MaxSum<C> ms{-std::numeric_limits<C>::infinity(), C(0)};
    for (int64_t k = 0; k < d; ++k) online_add(ms, widen(p[k * inner]));
    T* q = out + o * d * inner + r;
    for (int64_t k = 0; k < d; ++k) q[k * inner] = convert<T>(finish(widen(p[k * inner]), ms, log));
  }
}

template <class T>
void launch_rows(const Tensor& x, const Tensor& out, int64_t rows, int64_t cols, bool log,
                 int device, const char* op) {
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(out.data_ptr());
  cudaStream_t st = stream_of(device);
  const bool cached =
      dispatch_cached_rows(rows, cols, [&](auto warp, auto per, const RowLaunch& l) {
        constexpr bool kWarpRow = decltype(warp)::value;
        constexpr int kPer = decltype(per)::value;
        if (log)
          softmax_rows_cached_kernel<kWarpRow, kPer, true, T>
              <<<l.grid, l.block, 0, st>>>(xp, yp, rows, cols);
        else
          softmax_rows_cached_kernel<kWarpRow, kPer, false, T>
              <<<l.grid, l.block, 0, st>>>(xp, yp, rows, cols);
      });
  if (!cached) {
    const RowLaunch l = row_launch(rows, cols);
    if (l.warp_per_row)
      softmax_rows_kernel<true, T><<<l.grid, l.block, 0, st>>>(xp, yp, rows, cols, log);
    else
      softmax_rows_kernel<false, T><<<l.grid, l.block, 0, st>>>(xp, yp, rows, cols, log);
  }
  cuda_context::check_last_launch(op);
}

template <class T>
void run(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  const bool log = call.op == OpId::LogSoftmax;
  const Tensor x = packed(call.inputs[0], out.dtype());
  const int device = out.device().index;
  const int64_t dim = x.dim() == 0 ? 0 : call.attrs.dim;
  const int64_t d = x.dim() == 0 ? 1 : x.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= x.size(i);
  for (int64_t i = dim + 1; i < x.dim(); ++i) inner *= x.size(i);
  if (outer * inner * d == 0) return;
  DeviceScope scope(device);
  if (inner == 1) {
    with_packed_out(out, op,
                    [&](const Tensor& o) { launch_rows<T>(x, o, outer, d, log, device, op); });
    return;
  }
  if (outer * inner >= static_cast<int64_t>(sm_count(device)) * 256 || d <= 32) {
    with_packed_out(out, op, [&](const Tensor& o) {
      const int grid = grid_for(outer * inner, 256, 1, device);
      softmax_columns_kernel<T><<<grid, 256, 0, stream_of(device)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(o.data_ptr()), outer, d, inner, log);
      cuda_context::check_last_launch(op);
    });
    return;
  }
  // Few long columns: move dim last ([outer, inner, D]), run rows, copy back.
  Dims sizes{outer, inner, d}, strides{d * inner, 1, inner};
  Tensor moved =
      packed(Tensor::make_view(x.storage(), sizes, strides, x.storage_offset(), x.dtype()));
  Tensor result = Tensor::make(sizes, out.dtype(), out.device());
  launch_rows<T>(moved, result, outer * inner, d, log, device, op);
  // result[o, r, k] -> out[o, k, r]: view out (packed shape [outer, d, inner]) as
  // [outer, inner, d] when out is dense; otherwise go through a dense scratch.
  with_packed_out(out, op, [&](const Tensor& o) {
    Tensor target = Tensor::make_view(o.storage(), sizes, Dims{d * inner, 1, inner},
                                      o.storage_offset(), o.dtype());
    copy_convert(result, target, op);
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void softmax(const OpCall& call, const Tensor& out) {
  cuda_impl::visit_floating(out.dtype(), call.name(),
                            [&](auto tag) { cuda_impl::run<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
