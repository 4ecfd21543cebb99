// CUDA Sample and Nonzero families, simple and exact rather than fast.
// multinomial: a thread per row checks it (the errors come back in one copy; a bad row
// throws like the CPU) and then draws it with ops/sample_math.h, the CPU's very code, so
// both devices give the same samples. nonzero: one block; each thread counts the nonzero
// elements of its contiguous chunk, thread 0 turns the counts into offsets, and each
// thread writes its chunk's coordinates in order (row-major, as the CPU).
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/sample_math.h"

namespace kiln::cuda_impl {
namespace {

struct RowLoad {
  const double* row;
  KILN_HD double operator()(int64_t i) const { return row[i]; }
};

__global__ void check_rows_kernel(const double* p, int64_t rows, int64_t n, int64_t samples,
                                  bool replacement, int* errors) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    errors[r] = sample::check_row(RowLoad{p + r * n}, n, samples, replacement);
}

__global__ void draw_rows_kernel(const double* p, int64_t rows, int64_t n, int64_t samples,
                                 bool replacement, uint64_t seed, uint64_t offset, double* keys,
                                 int64_t* out) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t base =
        static_cast<uint64_t>(r) * static_cast<uint64_t>(replacement ? samples : n);
    sample::draw_row(RowLoad{p + r * n}, n, samples, replacement, seed, offset, base, keys + r * n,
                     out + r * samples);
  }
}

constexpr int kNonzeroThreads = 1024;
constexpr int kMaxRank = 12;

struct Sizes {
  int rank;
  int64_t s[kMaxRank];
};

__global__ void nonzero_kernel(const bool* x, int64_t n, Sizes sizes, int64_t* out,
                               unsigned long long* total) {
  __shared__ int64_t start[kNonzeroThreads];
  const int64_t chunk = (n + kNonzeroThreads - 1) / kNonzeroThreads;
  const int64_t lo = threadIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
  int64_t count = 0;
  for (int64_t i = lo; i < hi; ++i) count += x[i];
  start[threadIdx.x] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t running = 0;
    for (int t = 0; t < kNonzeroThreads; ++t) {
      const int64_t c = start[t];
      start[t] = running;
      running += c;
    }
    *total = static_cast<unsigned long long>(running);
  }
  __syncthreads();
  int64_t row = start[threadIdx.x];
  for (int64_t i = lo; i < hi; ++i) {
    if (!x[i]) continue;
    int64_t rest = i;
    for (int d = sizes.rank - 1; d >= 0; --d) {
      out[row * sizes.rank + d] = rest % sizes.s[d];
      rest /= sizes.s[d];
    }
    ++row;
  }
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void multinomial(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  const int device = out.device().index;
  DeviceScope scope(device);
  const Tensor probs = packed(call.inputs[0], DType::Float64);
  const int64_t n = probs.size(-1), rows = probs.numel() / n, samples = call.attrs.count;
  const bool replacement = call.attrs.replacement;
  cudaStream_t st = stream_of(device);
  DeviceBuffer errors(static_cast<size_t>(rows) * sizeof(int), device);
  const int grid = grid_for(rows, 128, 1, device);
  check_rows_kernel<<<grid, 128, 0, st>>>(probs.data<double>(), rows, n, samples, replacement,
                                          errors.as<int>());
  cuda_context::check_last_launch(call.name());
  std::vector<int> host(static_cast<size_t>(rows));
  cuda_context::copy_device_to_host(host.data(), errors.as<int>(), host.size() * sizeof(int),
                                    device);
  for (int64_t r = 0; r < rows; ++r) {
    const int e = host[static_cast<size_t>(r)];
    KILN_CHECK(e == sample::kRowOk, Error, "[multinomial] ", sample::row_error_text(e),
               rows > 1 ? detail::cat(" (row ", r, ")") : std::string());
  }
  DeviceBuffer keys(replacement ? sizeof(double) : static_cast<size_t>(rows * n) * sizeof(double),
                    device);
  with_packed_out(out, DType::Int64, call.name(), [&](const Tensor& o) {
    draw_rows_kernel<<<grid, 128, 0, st>>>(probs.data<double>(), rows, n, samples, replacement,
                                           static_cast<uint64_t>(call.scalars[0].to_int()),
                                           static_cast<uint64_t>(call.scalars[1].to_int()),
                                           keys.as<double>(), o.data<int64_t>());
    cuda_context::check_last_launch(call.name());
  });
}

void nonzero(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  const int device = out.device().index;
  DeviceScope scope(device);
  const Tensor x = packed(call.inputs[0], DType::Bool);
  KILN_CHECK(x.dim() <= kMaxRank, Error, "[nonzero] the CUDA kernel supports rank up to ", kMaxRank,
             ", got ", x.dim());
  Sizes sizes{static_cast<int>(x.dim()), {}};
  for (int64_t d = 0; d < x.dim(); ++d) sizes.s[d] = x.size(d);
  DeviceBuffer total(sizeof(unsigned long long), device);
  with_packed_out(out, DType::Int64, call.name(), [&](const Tensor& o) {
    nonzero_kernel<<<1, kNonzeroThreads, 0, stream_of(device)>>>(
        x.data<bool>(), x.numel(), sizes, o.data<int64_t>(), total.as<unsigned long long>());
    cuda_context::check_last_launch(call.name());
  });
  unsigned long long found = 0;
  cuda_context::copy_device_to_host(&found, total.as<unsigned long long>(), sizeof(found), device);
  KILN_CHECK(static_cast<int64_t>(found) == call.attrs.count, Error,
             "[nonzero] internal: expected ", call.attrs.count, " nonzero elements, found ", found);
}

}  // namespace kiln::cuda
