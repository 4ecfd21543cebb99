// Index-generated outputs: out[i] = g(i) for the row-major linear index i of each
// element, for factories (full, arange) and random ops. A dense out is written directly;
// a strided out (fill_ into a view) goes through the offset calculator.
#pragma once

#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"

namespace kiln::cuda_impl {

template <class T, class G>
__global__ void __launch_bounds__(kPointwiseThreads)
    generate_contiguous_kernel(T* out, int64_t n, G g) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = g(i);
}

template <class T, class G>
__global__ void __launch_bounds__(kPointwiseThreads)
    generate_strided_kernel(T* out, StridedIndexer<1> index, int64_t n, G g) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1];
    index.offsets(i, off);
    out[off[0]] = g(i);
  }
}

// g(i) must return T (out's storage type).
template <class T, class G>
void launch_generate(const Tensor& out, const G& g, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceScope scope(device);
  const int grid = grid_for(n, kPointwiseThreads, 1, device);
  T* data = static_cast<T*>(out.data_ptr());
  if (out.is_contiguous()) {
    generate_contiguous_kernel<T, G><<<grid, kPointwiseThreads, 0, stream_of(device)>>>(data, n, g);
  } else {
    StridedIndexer<1> index = make_indexer<1>(out.sizes(), {out.strides()}, op);
    generate_strided_kernel<T, G>
        <<<grid, kPointwiseThreads, 0, stream_of(device)>>>(data, index, n, g);
  }
  cuda_context::check_last_launch(op);
}

}  // namespace kiln::cuda_impl
