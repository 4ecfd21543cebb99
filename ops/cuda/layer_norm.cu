// layer_norm(x, normalized_shape = attrs.dims, weight?, bias?, eps = scalars[0]): each row
// of the trailing normalized dims is normalized with its mean and biased variance,
// (x - mean) / sqrt(var + eps) * weight + bias, computed in compute_t<T> (float for
// 16-bit floats). One warp or block per row (ops/cuda/rowwise.cuh); two passes over the
// row for the statistics (mean, then the sum of squared deviations: no cancellation),
// a third to write. Rows of up to 8192 elements are held in registers, so memory is read
// once; longer rows are re-read (from L2) by each pass.
#include "ops/cuda/common.cuh"
#include "ops/cuda/rowwise.cuh"
#include "ops/pointwise_math.h"

namespace kiln::cuda_impl {
namespace {

struct AddOp {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
};

template <bool WarpPerRow, class T>
__global__ void __launch_bounds__(kBlockRowThreads)
    layer_norm_kernel(const T* x, const T* weight, const T* bias, T* out, int64_t rows,
                      int64_t cols, compute_t<T> eps) {
  using C = compute_t<T>;
  using G = RowGroup<WarpPerRow>;
  __shared__ C scratch[kWarp];
  const int64_t row = G::row();
  const bool active = row < rows;
  const T* p = x + row * cols;
  C sum = C(0);
  if (active) {
    for (int64_t c = G::lane(); c < cols; c += G::size()) sum += widen(p[c]);
  }
  const C mean = G::allreduce(sum, AddOp{}, scratch) / static_cast<C>(cols);
  C sq = C(0);
  if (active) {
    for (int64_t c = G::lane(); c < cols; c += G::size()) {
      const C d = widen(p[c]) - mean;
      sq += d * d;
    }
  }
  const C var = G::allreduce(sq, AddOp{}, scratch) / static_cast<C>(cols);
  if (!active) return;
  const C rstd = C(1) / pm::sqrt(var + eps);
  T* q = out + row * cols;
  for (int64_t c = G::lane(); c < cols; c += G::size()) {
    C v = (widen(p[c]) - mean) * rstd;
    if (weight) v *= widen(weight[c]);
    if (bias) v += widen(bias[c]);
    q[c] = convert<T>(v);
  }
}

// The row in registers (ops/cuda/rowwise.cuh): one read, then the same two statistics.
template <bool WarpPerRow, int PerThread, class T>
__global__ void __launch_bounds__(1024)
    layer_norm_cached_kernel(const T* x, const T* weight, const T* bias, T* out, int64_t rows,
                             int64_t cols, compute_t<T> eps) {
  using C = compute_t<T>;
  using G = RowGroup<WarpPerRow>;
  __shared__ C scratch[kWarp];
  const int64_t row = G::row();
  const bool active = row < rows;
  const T* p = x + row * cols;
  const int lane = G::lane(), size = G::size();
  C v[PerThread];
  C sum = C(0);
#pragma unroll
  for (int j = 0; j < PerThread; ++j) {
    const int64_t c = lane + static_cast<int64_t>(j) * size;
    v[j] = active && c < cols ? widen(p[c]) : C(0);
    sum += v[j];
  }
  const C mean = G::allreduce(sum, AddOp{}, scratch) / static_cast<C>(cols);
  C sq = C(0);
#pragma unroll
  for (int j = 0; j < PerThread; ++j) {
    if (lane + static_cast<int64_t>(j) * size < cols) {
      const C d = v[j] - mean;
      sq += d * d;
    }
  }
  const C var = G::allreduce(sq, AddOp{}, scratch) / static_cast<C>(cols);
  if (!active) return;
  const C rstd = C(1) / pm::sqrt(var + eps);
  T* q = out + row * cols;
#pragma unroll
  for (int j = 0; j < PerThread; ++j) {
    const int64_t c = lane + static_cast<int64_t>(j) * size;
    if (c < cols) {
      C y = (v[j] - mean) * rstd;
      if (weight) y *= widen(weight[c]);
      if (bias) y += widen(bias[c]);
      q[c] = convert<T>(y);
    }
  }
}

template <class T>
void run(const OpCall& call, const Tensor& out) {
  using C = compute_t<T>;
  const char* op = call.name();
  const Tensor x = packed(call.inputs[0], out.dtype());
  Tensor weight, bias;
  if (call.inputs.size() > 1 && call.inputs[1].defined())
    weight = packed(call.inputs[1], out.dtype());
  if (call.inputs.size() > 2 && call.inputs[2].defined())
    bias = packed(call.inputs[2], out.dtype());
  int64_t cols = 1;
  for (int64_t s : call.attrs.dims) cols *= s;
  if (cols == 0 || x.numel() == 0) return;
  const int64_t rows = x.numel() / cols;
  const C eps = static_cast<C>(call.scalars[0].to_double());
  const int device = out.device().index;
  DeviceScope scope(device);
  with_packed_out(out, op, [&](const Tensor& o) {
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = weight.defined() ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    const T* bp = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* yp = static_cast<T*>(o.data_ptr());
    const bool cached =
        dispatch_cached_rows(rows, cols, [&](auto warp, auto per, const RowLaunch& l) {
          layer_norm_cached_kernel<decltype(warp)::value, decltype(per)::value, T>
              <<<l.grid, l.block, 0, stream_of(device)>>>(xp, wp, bp, yp, rows, cols, eps);
        });
    if (!cached) {
      const RowLaunch l = row_launch(rows, cols);
      if (l.warp_per_row)
        layer_norm_kernel<true, T>
            <<<l.grid, l.block, 0, stream_of(device)>>>(xp, wp, bp, yp, rows, cols, eps);
      else
        layer_norm_kernel<false, T>
            <<<l.grid, l.block, 0, stream_of(device)>>>(xp, wp, bp, yp, rows, cols, eps);
    }
    cuda_context::check_last_launch(op);
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void layer_norm(const OpCall& call, const Tensor& out) {
  cuda_impl::visit_floating(out.dtype(), call.name(),
                            [&](auto tag) { cuda_impl::run<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
