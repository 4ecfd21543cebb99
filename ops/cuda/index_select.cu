// index_select(x, attrs.dim, index): out = x with dim replaced by the gathered entries.
// The index (0-D or 1-D, int32 or int64, any stride) is validated on the device first:
// the first offending position is recorded with atomicMin and copied back (one sync),
// and a bad index throws IndexError "[index_select] index 7 is out of range for dim 0
// with size 5". The gather then runs on a packed x, viewed as [outer, size, inner].
#include <optional>

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {
namespace {

constexpr unsigned long long kNoBadIndex = 0x7f7f7f7f7f7f7f7full;  // memset(0x7f) pattern

template <class I>
__global__ void check_index_kernel(const I* index, int64_t stride, int64_t n, int64_t size,
                                   unsigned long long* first_bad) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t v = static_cast<int64_t>(index[i * stride]);
    if (v < 0 || v >= size) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

template <int Bytes>
struct Element;
template <>
struct Element<1> {
  using type = uint8_t;
};
template <>
struct Element<2> {
  using type = uint16_t;
};
template <>
struct Element<4> {
  using type = uint32_t;
};
template <>
struct Element<8> {
  using type = uint64_t;
};

// U: the unsigned type wide enough for every linear index (32-bit division when possible).
template <class E, class I, class U>
__global__ void gather_kernel(E* out, const E* x, const I* index, int64_t index_stride, U n, U m,
                              U inner, U size) {
  const U step = static_cast<U>(gridDim.x) * blockDim.x;
  for (U i = static_cast<U>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const U r = i % inner;
    const U rest = i / inner;
    const U j = rest % m;
    const U o = rest / m;
    const U src = static_cast<U>(index[static_cast<int64_t>(j) * index_stride]);
    out[i] = x[(o * size + src) * inner + r];
  }
}

// The value of the first out-of-range entry of index, if any (syncs the stream).
template <class I>
std::optional<int64_t> first_bad_index(const Tensor& index, int64_t size, int device,
                                       const char* op) {
  const int64_t n = index.numel();
  const int64_t stride = index.dim() == 0 ? 0 : index.stride(0);
  DeviceBuffer flag(sizeof(unsigned long long), device);
  auto* first_bad = flag.as<unsigned long long>();
  cudaStream_t st = stream_of(device);
  check(cudaMemsetAsync(first_bad, 0x7f, sizeof(unsigned long long), st), op, "cudaMemsetAsync");
  const int grid = grid_for(n, 256, 1, device);
  check_index_kernel<I>
      <<<grid, 256, 0, st>>>(static_cast<const I*>(index.data_ptr()), stride, n, size, first_bad);
  cuda_context::check_last_launch(op);
  unsigned long long pos = kNoBadIndex;
  cuda_context::copy_device_to_host(&pos, first_bad, sizeof(pos), device);
  if (pos == kNoBadIndex) return std::nullopt;
  I value{};
  cuda_context::copy_device_to_host(
      &value, static_cast<const I*>(index.data_ptr()) + static_cast<int64_t>(pos) * stride,
      sizeof(I), device);
  return static_cast<int64_t>(value);
}

template <class E, class I, class U>
void launch_gather(const Tensor& out, const Tensor& x, const Tensor& index, int64_t m,
                   int64_t inner, int64_t size, int device, const char* op) {
  const int64_t n = out.numel();
  const int grid = grid_for(n, 256, 1, device);
  gather_kernel<E, I, U><<<grid, 256, 0, stream_of(device)>>>(
      static_cast<E*>(out.data_ptr()), static_cast<const E*>(x.data_ptr()),
      static_cast<const I*>(index.data_ptr()), index.dim() == 0 ? 0 : index.stride(0),
      static_cast<U>(n), static_cast<U>(m), static_cast<U>(inner), static_cast<U>(size));
  cuda_context::check_last_launch(op);
}

template <class I>
void run(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  const Tensor& index = call.inputs[1];
  const Tensor x = packed(call.inputs[0]);
  const int device = out.device().index;
  const int64_t dim = x.dim() == 0 ? 0 : call.attrs.dim;
  const int64_t size = x.dim() == 0 ? 1 : x.size(dim);
  const int64_t m = index.numel();
  DeviceScope scope(device);
  if (m > 0) {
    const std::optional<int64_t> bad = first_bad_index<I>(index, size, device, op);
    KILN_CHECK(!bad, IndexError, "[", op, "] index ", *bad, " is out of range for dim ", dim,
               " with size ", size);
  }
  if (out.numel() == 0) return;
  if (x.dim() == 0) {  // a 0-dim input with one valid index: a copy
    copy_convert(x, out, op);
    return;
  }
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  with_packed_out(out, op, [&](const Tensor& o) {
    const bool narrow = x.numel() < (int64_t{1} << 31) && o.numel() < (int64_t{1} << 31);
    auto go = [&](auto elem) {
      using E = decltype(elem);
      if (narrow)
        launch_gather<E, I, uint32_t>(o, x, index, m, inner, size, device, op);
      else
        launch_gather<E, I, uint64_t>(o, x, index, m, inner, size, device, op);
    };
    switch (o.element_size()) {
      case 1:
        go(Element<1>::type{});
        break;
      case 2:
        go(Element<2>::type{});
        break;
      case 4:
        go(Element<4>::type{});
        break;
      default:
        go(Element<8>::type{});
        break;
    }
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void index_select(const OpCall& call, const Tensor& out) {
  if (call.inputs[1].dtype() == DType::Int32)
    cuda_impl::run<int32_t>(call, out);
  else
    cuda_impl::run<int64_t>(call, out);
}

}  // namespace kiln::cuda
