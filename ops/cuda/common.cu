// Host helpers shared by the CUDA kernels (see ops/cuda/common.cuh).
#include <mutex>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"

namespace kiln::cuda_impl {

void check(cudaError_t e, const char* op, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the runtime stays usable
  throw BackendError(detail::cat("[", op, "] ", what, " failed: ", cudaGetErrorName(e), " (",
                                 cudaGetErrorString(e), ")"));
}

int sm_count(int device) {
  static std::mutex mutex;
  static std::vector<int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  if (counts.empty()) counts.assign(static_cast<size_t>(cuda_context::device_count()), 0);
  KILN_CHECK(device >= 0 && device < static_cast<int>(counts.size()), DeviceError,
             "[cuda] device cuda:", device, " does not exist");
  int& n = counts[static_cast<size_t>(device)];
  if (n == 0) {
    int value = 0;
    check(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device), "cuda",
          "cudaDeviceGetAttribute(multiprocessor count)");
    n = value > 0 ? value : 1;
  }
  return n;
}

int grid_for(int64_t n, int threads, int per_thread, int device) {
  const int64_t per_block = static_cast<int64_t>(threads) * per_thread;
  const int64_t needed = (n + per_block - 1) / per_block;
  // 2048 resident threads per SM on sm_90: enough blocks to fill every SM.
  const int64_t full = static_cast<int64_t>(sm_count(device)) * (2048 / threads);
  int64_t g = needed < full ? needed : full;
  return static_cast<int>(g < 1 ? 1 : g);
}

Dims broadcast_strides(const Tensor& t, const Dims& sizes) {
  const size_t rank = sizes.size(), trank = t.sizes().size();
  Dims out(rank, 0);
  for (size_t i = 0; i < trank; ++i) {
    const size_t d = rank - trank + i;
    out[d] = t.sizes()[i] == 1 && sizes[d] != 1 ? 0 : t.strides()[i];
  }
  return out;
}

Tensor packed(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor out = Tensor::make(t.sizes(), dtype, t.device());
  copy_convert(t, out, "contiguous");
  return out;
}

}  // namespace kiln::cuda_impl
