// Row-wise kernels (softmax, layer_norm) over a packed [rows, cols] layout: a warp per row
// for rows of up to kWarpRowLimit elements (blocks of (32, 8): 8 rows per block), a block
// of kBlockRowThreads threads per row beyond. RowGroup hides the difference.
#pragma once

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {

constexpr int64_t kWarpRowLimit = 1024;
constexpr int kBlockRowThreads = 512;
constexpr int kWarpRowsPerBlock = 8;

template <bool WarpPerRow>
struct RowGroup {
  __device__ static int64_t row() {
    if constexpr (WarpPerRow)
      return static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
    else
      return blockIdx.x;
  }
  __device__ static int lane() { return threadIdx.x; }
  __device__ static int size() { return blockDim.x; }
  // Every thread of the row gets f folded over the row's threads' values. In block mode
  // all threads of the block must call it (scratch: 32 values of shared memory).
  template <class T, class F>
  __device__ static T allreduce(T v, F f, T* scratch) {
    if constexpr (WarpPerRow)
      return group_allreduce<kWarp>(v, f);
    else
      return block_allreduce(v, f, scratch);
  }
};

// Launches kernel<true> (warp per row) or kernel<false> (block per row) for `rows` rows of
// `cols` elements. Kernels take (rows, cols, args...).
struct RowLaunch {
  dim3 grid, block;
  bool warp_per_row;
};
inline RowLaunch row_launch(int64_t rows, int64_t cols) {
  if (cols <= kWarpRowLimit) {
    const int64_t blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    return {dim3(static_cast<unsigned>(blocks)), dim3(kWarp, kWarpRowsPerBlock), true};
  }
  return {dim3(static_cast<unsigned>(rows)), dim3(kBlockRowThreads), false};
}

}  // namespace kiln::cuda_impl

namespace kiln::cuda_impl {

// Register-cached row kernels: each thread keeps its PerThread elements of the row
// (columns lane, lane + size, ...) in registers, so the row is read from memory once.
// Rows of up to 256 elements use a warp per row (several rows per block); longer ones a
// block per row, sized so that each thread holds 8 elements (64 to 512 threads; many
// small blocks keep enough warps resident to hide memory latency), and up to 8192
// elements 512 threads x 16 (faster than 1024 x 8 on an H200). Longer rows return false
// (the caller falls back to a re-reading kernel). f(warp_per_row, per_thread, launch)
// receives std::integral_constant tags.
template <class F>
bool dispatch_cached_rows(int64_t rows, int64_t cols, F&& f) {
  using std::integral_constant;
  const RowLaunch warp = row_launch(rows, 1);  // warp-per-row geometry
  auto block = [&](unsigned threads) {
    return RowLaunch{dim3(static_cast<unsigned>(rows)), dim3(threads), false};
  };
  if (cols <= 32)
    f(integral_constant<bool, true>{}, integral_constant<int, 1>{}, warp);
  else if (cols <= 64)
    f(integral_constant<bool, true>{}, integral_constant<int, 2>{}, warp);
  else if (cols <= 128)
    f(integral_constant<bool, true>{}, integral_constant<int, 4>{}, warp);
  else if (cols <= 256)
    f(integral_constant<bool, true>{}, integral_constant<int, 8>{}, warp);
  else if (cols <= 512)
    f(integral_constant<bool, false>{}, integral_constant<int, 8>{}, block(64));
  else if (cols <= 1024)
    f(integral_constant<bool, false>{}, integral_constant<int, 8>{}, block(128));
  else if (cols <= 2048)
    f(integral_constant<bool, false>{}, integral_constant<int, 8>{}, block(256));
  else if (cols <= 4096)
    f(integral_constant<bool, false>{}, integral_constant<int, 8>{}, block(512));
  else if (cols <= 8192)
    f(integral_constant<bool, false>{}, integral_constant<int, 16>{}, block(512));
  else
    return false;
  return true;
}

}  // namespace kiln::cuda_impl
