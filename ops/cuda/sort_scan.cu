// CUDA Sort family (argsort, topk) and Scan family (cumsum, cumprod, prod) along
// attrs.dim, on packed inputs seen as [outer, size, inner].
//
// Sort: each element's rank in its line is counted directly (a thread per element
// compares against the whole line: O(size^2) work, no shared state, stable by index),
// then out[rank] = index for the ranks topk keeps. Values compare as order-preserving
// uint64 keys (NaN the largest, -0.0 equal to 0.0), so the order is the CPU's exactly.
// Simple and obviously right rather than fast for long lines.
// Scan: a thread per line walks it in order, accumulating in double (floats) or int64
// (integers and bool), like the CPU kernel.
#include <cstring>

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {
namespace {

template <class T>
__device__ uint64_t order_key(T raw) {
  constexpr uint64_t kSign = 0x8000000000000000ull;
  if constexpr (std::is_floating_point_v<compute_t<T>>) {
    double v = static_cast<double>(widen(raw));
    if (v != v) return ~0ull;
    if (v == 0.0) v = 0.0;
    const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(v));
    return (bits & kSign) ? ~bits : bits | kSign;
  } else {
    return static_cast<uint64_t>(static_cast<int64_t>(raw)) ^ kSign;
  }
}

template <class T>
__global__ void rank_kernel(int64_t* out, const T* x, int64_t outer, int64_t size, int64_t inner,
                            int64_t keep, bool descending) {
  const int64_t n = outer * size * inner;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = t % inner, i = (t / inner) % size, o = t / (inner * size);
    const T* line = x + o * size * inner + r;
    uint64_t key = order_key(line[i * inner]);
    if (descending) key = ~key;
    int64_t rank = 0;
    for (int64_t j = 0; j < size; ++j) {
      uint64_t other = order_key(line[j * inner]);
      if (descending) other = ~other;
      rank += other < key || (other == key && j < i);
    }
    if (rank < keep) out[(o * keep + rank) * inner + r] = i;
  }
}

template <class T, class Out, class Acc>
__global__ void scan_kernel(Out* out, const T* x, int64_t outer, int64_t size, int64_t inner,
                            bool sum, bool total) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, r = t % inner;
    Acc acc = sum ? Acc(0) : Acc(1);
    for (int64_t i = 0; i < size; ++i) {
      const Acc e = static_cast<Acc>(widen(x[(o * size + i) * inner + r]));
      acc = sum ? acc + e : acc * e;
      if (!total) out[(o * size + i) * inner + r] = convert<Out>(acc);
    }
    if (total) out[o * inner + r] = convert<Out>(acc);
  }
}

struct Lines {
  int64_t outer = 1, size = 1, inner = 1;
};
Lines lines_of(const Tensor& x, int64_t dim) {
  Lines l;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) l.outer *= x.size(d);
    if (d == dim) l.size = x.size(d);
    if (d > dim) l.inner *= x.size(d);
  }
  return l;
}

template <class T>
void run_sort(const OpCall& c, const Tensor& out) {
  const int device = out.device().index;
  DeviceScope scope(device);
  const Tensor x = packed(c.inputs[0]);
  const Lines l = lines_of(x, c.attrs.dim);
  const int64_t keep = c.op == OpId::Topk && x.dim() > 0 ? c.attrs.count : l.size;  // CPU's rule
  with_packed_out(out, DType::Int64, c.name(), [&](const Tensor& o) {
    const int64_t n = x.numel();
    rank_kernel<T><<<grid_for(n, 256, 1, device), 256, 0, stream_of(device)>>>(
        o.data<int64_t>(), x.data<T>(), l.outer, l.size, l.inner, keep, c.attrs.descending);
    cuda_context::check_last_launch(c.name());
  });
}

template <class T>
void run_scan(const OpCall& c, const Tensor& out) {
  constexpr bool kFloat = std::is_floating_point_v<compute_t<T>>;
  using Acc = std::conditional_t<kFloat, double, int64_t>;
  using Out = std::conditional_t<kFloat, T, int64_t>;
  const int device = out.device().index;
  DeviceScope scope(device);
  const Tensor x = packed(c.inputs[0]);
  const Lines l = lines_of(x, c.attrs.dim);
  with_packed_out(out, dtype_of<Out>(), c.name(), [&](const Tensor& o) {
    scan_kernel<T, Out, Acc>
        <<<grid_for(l.outer * l.inner, 256, 1, device), 256, 0, stream_of(device)>>>(
            o.data<Out>(), x.data<T>(), l.outer, l.size, l.inner, c.op == OpId::Cumsum,
            c.op == OpId::Prod);
    cuda_context::check_last_launch(c.name());
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void sort(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(),
              [&](auto tag) { cuda_impl::run_sort<decltype(tag)>(call, out); });
}

void scan(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(),
              [&](auto tag) { cuda_impl::run_scan<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
