// The row-reduction engine: out[r] = project(fold over c of x[r * cols + c]) for a
// packed [rows, cols] input (the caller permutes the reduced dims innermost and packs).
//
// A reduction op is a functor with
//   using acc_t = ...;                         // plain struct or arithmetic type
//   acc_t identity() const;
//   acc_t reduce(acc_t a, In v, int64_t c) const;   // c: column (for argmax)
//   acc_t combine(acc_t a, acc_t b) const;          // associative
//   Out project(acc_t a) const;
//
// Geometry: blocks of 256 threads shaped (tx, 256 / tx): tx threads per row (a power of
// two, 256 for long rows, fewer for short rows so that one block covers several rows).
// Each thread keeps 4 independent accumulators (4 loads in flight, shorter dependency
// chains, and for float sums a smaller rounding error), then the row's threads combine
// through warp shuffles and, for tx > 32, shared memory. When there are too few rows to
// fill the device, or a row is very long (more than 256 elements per thread), each row is
// split over several blocks (gridDim.y) that write partial accumulators to scratch
// memory, and a second kernel (one warp per row) combines them.
#pragma once

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {

constexpr int kReduceThreads = 256;
constexpr int kReduceUnroll = 4;

template <class Op, class Acc>
__device__ __forceinline__ Acc row_threads_combine(const Op& op, Acc a, Acc* scratch) {
  const int tx = blockDim.x;
  const int width = tx < kWarp ? tx : kWarp;
  for (int m = width / 2; m > 0; m /= 2) a = op.combine(a, shfl_xor(a, m));
  if (tx > kWarp) {  // several warps per row (then blockDim.y <= 4 and warps hold one row)
    const int warps_per_row = tx / kWarp;
    const int slot = threadIdx.y * warps_per_row + threadIdx.x / kWarp;
    if (threadIdx.x % kWarp == 0) scratch[slot] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < warps_per_row; ++w) a = op.combine(a, scratch[slot + w]);
    }
  }
  return a;
}

template <class Op, class In, class Out>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_rows_kernel(const In* x, int64_t rows, int64_t cols, int64_t cols_per_split, Out* out,
                       typename Op::acc_t* partials, Op op) {
  using Acc = typename Op::acc_t;
  __shared__ Acc scratch[kReduceThreads / kWarp];
  const int tx = blockDim.x;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * cols_per_split;
  const int64_t end = begin + cols_per_split < cols ? begin + cols_per_split : cols;
  Acc acc[kReduceUnroll];
#pragma unroll
  for (int u = 0; u < kReduceUnroll; ++u) acc[u] = op.identity();
  if (active) {
    const In* p = x + row * cols;
    int64_t c = begin + threadIdx.x;
    for (; c + (kReduceUnroll - 1) * tx < end; c += kReduceUnroll * tx) {
      In v[kReduceUnroll];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) v[u] = p[c + u * tx];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) acc[u] = op.reduce(acc[u], v[u], c + u * tx);
    }
    for (; c < end; c += tx) acc[0] = op.reduce(acc[0], p[c], c);
  }
  Acc a = acc[0];
#pragma unroll
  for (int u = 1; u < kReduceUnroll; ++u) a = op.combine(a, acc[u]);
  a = row_threads_combine(op, a, scratch);
  if (active && threadIdx.x == 0) {
    if (gridDim.y == 1)
      out[row] = op.project(a);
    else
      partials[row * gridDim.y + blockIdx.y] = a;
  }
}

// One warp per row folds the row's `splits` partial accumulators.
template <class Op, class Out>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_partials_kernel(const typename Op::acc_t* partials, int64_t rows, int splits, Out* out,
                           Op op) {
  using Acc = typename Op::acc_t;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  Acc a = op.identity();
  if (row < rows) {
    // Partials of one row are in column order: fold them in order per lane, then
    // combine lanes (lane order) so that argmax keeps the first index on ties.
    for (int s = threadIdx.x; s < splits; s += kWarp) a = op.combine(a, partials[row * splits + s]);
  }
  for (int m = kWarp / 2; m > 0; m /= 2) a = op.combine(a, shfl_xor(a, m));
  if (row < rows && threadIdx.x == 0) out[row] = op.project(a);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How many blocks share one output's `cols` reduced elements, each with `lanes` threads:
// at most 256 elements per thread (accuracy), and more splits while the output blocks
// alone cannot fill the device, as long as each thread keeps at least 16 elements.
struct ReduceSplit {
  int64_t splits;     // blocks per output
  int64_t per_split;  // reduced elements each of them covers
};
inline ReduceSplit reduce_splits(int64_t cols, int64_t lanes, int64_t out_blocks, int device) {
  const int64_t target_blocks = static_cast<int64_t>(sm_count(device)) * 4;
  int64_t splits = ceil_div(cols, lanes * 256);
  if (out_blocks < target_blocks) {
    int64_t par = ceil_div(target_blocks, out_blocks);
    const int64_t most = ceil_div(cols, lanes * 16);
    if (par > most) par = most;
    if (par > splits) splits = par;
  }
  if (splits > 65535) splits = 65535;
  if (splits < 1) splits = 1;
  const int64_t per_split = ceil_div(cols, splits);
  if (per_split > 0) splits = ceil_div(cols, per_split);
  return ReduceSplit{splits < 1 ? 1 : splits, per_split};
}

// Reduces a packed [rows, cols] input into out[rows] (both on `device`).
template <class Op, class In, class Out>
void launch_reduce(const In* x, int64_t rows, int64_t cols, Out* out, const Op& op, int device,
                   const char* name) {
  using Acc = typename Op::acc_t;
  if (rows == 0) return;
  int tx = 1;
  while (tx < kReduceThreads && tx < cols) tx *= 2;
  const int ty = kReduceThreads / tx;
  const int64_t row_blocks = ceil_div(rows, ty);
  KILN_CHECK(row_blocks <= 0x7fffffff, ShapeError, "[", name, "] too many rows (", rows,
             ") for one CUDA launch");
  const auto [splits, per_split] = reduce_splits(cols, tx, row_blocks, device);

  DeviceScope scope(device);
  cudaStream_t st = stream_of(device);
  const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits));
  if (splits == 1) {
    reduce_rows_kernel<Op, In, Out><<<grid, block, 0, st>>>(x, rows, cols, cols, out, nullptr, op);
    cuda_context::check_last_launch(name);
    return;
  }
  DeviceBuffer partials(static_cast<size_t>(rows * splits) * sizeof(Acc), device);
  reduce_rows_kernel<Op, In, Out>
      <<<grid, block, 0, st>>>(x, rows, cols, per_split, out, partials.as<Acc>(), op);
  cuda_context::check_last_launch(name);
  constexpr int kRowsPerBlock = kReduceThreads / kWarp;
  const int64_t blocks = ceil_div(rows, kRowsPerBlock);
  reduce_partials_kernel<Op, Out>
      <<<static_cast<unsigned>(blocks), dim3(kWarp, kRowsPerBlock), 0, st>>>(
          partials.as<Acc>(), rows, static_cast<int>(splits), out, op);
  cuda_context::check_last_launch(name);
}

}  // namespace kiln::cuda_impl

namespace kiln::cuda_impl {

// Column variant: x is a packed [cols, rows] input (the reduced dims outermost, e.g. a sum
// over the batch dim) and out[r] folds column r. Blocks of (32, 8) threads: 32 adjacent
// columns (coalesced loads) times 8 interleaved row groups, folded through shared memory;
// long columns are split over gridDim.y like rows are in launch_reduce.
constexpr int kColumnLanes = 32, kColumnGroups = 8;

template <class Op, class In, class Out>
__global__ void __launch_bounds__(kColumnLanes* kColumnGroups)
    reduce_columns_kernel(const In* x, int64_t rows, int64_t cols, int64_t cols_per_split, Out* out,
                          typename Op::acc_t* partials, Op op) {
  using Acc = typename Op::acc_t;
  __shared__ Acc scratch[kColumnGroups][kColumnLanes + 1];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kColumnLanes + threadIdx.x;
  const bool active = row < rows;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * cols_per_split;
  const int64_t end = begin + cols_per_split < cols ? begin + cols_per_split : cols;
  Acc acc[kReduceUnroll];
#pragma unroll
  for (int u = 0; u < kReduceUnroll; ++u) acc[u] = op.identity();
  if (active) {
    constexpr int kStep = kColumnGroups;
    int64_t c = begin + threadIdx.y;
    for (; c + (kReduceUnroll - 1) * kStep < end; c += kReduceUnroll * kStep) {
      In v[kReduceUnroll];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) v[u] = x[(c + u * kStep) * rows + row];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) acc[u] = op.reduce(acc[u], v[u], c + u * kStep);
    }
    for (; c < end; c += kStep) acc[0] = op.reduce(acc[0], x[c * rows + row], c);
  }
  Acc a = acc[0];
#pragma unroll
  for (int u = 1; u < kReduceUnroll; ++u) a = op.combine(a, acc[u]);
  scratch[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  for (int g = 1; g < kColumnGroups; ++g) a = op.combine(a, scratch[g][threadIdx.x]);
  if (gridDim.y == 1)
    out[row] = op.project(a);
  else
    partials[row * gridDim.y + blockIdx.y] = a;
}

// Reduces a packed [cols, rows] input over its first dim into out[rows].
template <class Op, class In, class Out>
void launch_reduce_columns(const In* x, int64_t rows, int64_t cols, Out* out, const Op& op,
                           int device, const char* name) {
  using Acc = typename Op::acc_t;
  if (rows == 0) return;
  const int64_t col_blocks = ceil_div(rows, kColumnLanes);
  KILN_CHECK(col_blocks <= 0x7fffffff, ShapeError, "[", name, "] too many outputs (", rows,
             ") for one CUDA launch");
  const auto [splits, per_split] = reduce_splits(cols, kColumnGroups, col_blocks, device);

  DeviceScope scope(device);
  cudaStream_t st = stream_of(device);
  const dim3 block(kColumnLanes, kColumnGroups);
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
  if (splits == 1) {
    reduce_columns_kernel<Op, In, Out>
        <<<grid, block, 0, st>>>(x, rows, cols, cols, out, nullptr, op);
    cuda_context::check_last_launch(name);
    return;
  }
  DeviceBuffer partials(static_cast<size_t>(rows * splits) * sizeof(Acc), device);
  reduce_columns_kernel<Op, In, Out>
      <<<grid, block, 0, st>>>(x, rows, cols, per_split, out, partials.as<Acc>(), op);
  cuda_context::check_last_launch(name);
  constexpr int kRowsPerBlock = kReduceThreads / kWarp;
  const int64_t blocks = ceil_div(rows, kRowsPerBlock);
  reduce_partials_kernel<Op, Out>
      <<<static_cast<unsigned>(blocks), dim3(kWarp, kRowsPerBlock), 0, st>>>(
          partials.as<Acc>(), rows, static_cast<int>(splits), out, op);
  cuda_context::check_last_launch(name);
}

}  // namespace kiln::cuda_impl
