// index_select(x, attrs.dim, index): out = x with dim replaced by the gathered entries.
// The index (0-D or 1-D, int32 or int64, any stride) is checked on the device, with no
// host sync: a kernel that meets an out-of-range entry writes a zero in its place and
// records the first one in the device's DeviceErrorRecord (runtime/cuda_context.h); the
// next host read raises IndexError "[index_select] index 7 is out of range for dim 0
// with size 5 (...)". The gather runs on a packed x, viewed as [outer, size, inner], and
// checks the index itself; the index alone is checked when nothing is gathered.
#include "ops/cuda/bad_index.cuh"
#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {
namespace {

using Report = BadIndexReport;

template <class I>
__global__ void check_index_kernel(const I* index, int64_t stride, int64_t n, int64_t size,
                                   Report report) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t v = static_cast<int64_t>(index[i * stride]);
    if (v < 0 || v >= size) report_bad_index(report, v, size);
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
// An out-of-range index is recorded and its entries of out are zero (never read outside x).
template <class E, class I, class U>
__global__ void gather_kernel(E* out, const E* x, const I* index, int64_t index_stride, U n, U m,
                              U inner, U size, Report report) {
  const U step = static_cast<U>(gridDim.x) * blockDim.x;
  for (U i = static_cast<U>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const U r = i % inner;
    const U rest = i / inner;
    const U j = rest % m;
    const U o = rest / m;
    const int64_t v = static_cast<int64_t>(index[static_cast<int64_t>(j) * index_stride]);
    if (v < 0 || v >= static_cast<int64_t>(size)) {
      report_bad_index(report, v, static_cast<int64_t>(size));
      out[i] = E{};
      continue;
    }
    out[i] = x[(o * size + static_cast<U>(v)) * inner + r];
  }
}

template <class I>
void launch_check(const Tensor& index, int64_t size, int device, const Report& report,
                  const char* op) {
  const int64_t n = index.numel();
  const int grid = grid_for(n, 256, 1, device);
  check_index_kernel<I><<<grid, 256, 0, stream_of(device)>>>(
      static_cast<const I*>(index.data_ptr()), index.dim() == 0 ? 0 : index.stride(0), n, size,
      report);
  cuda_context::check_last_launch(op);
}

template <class E, class I, class U>
void launch_gather(const Tensor& out, const Tensor& x, const Tensor& index, int64_t m,
                   int64_t inner, int64_t size, int device, const Report& report, const char* op) {
  const int64_t n = out.numel();
  const int grid = grid_for(n, 256, 1, device);
  gather_kernel<E, I, U><<<grid, 256, 0, stream_of(device)>>>(
      static_cast<E*>(out.data_ptr()), static_cast<const E*>(x.data_ptr()),
      static_cast<const I*>(index.data_ptr()), index.dim() == 0 ? 0 : index.stride(0),
      static_cast<U>(n), static_cast<U>(m), static_cast<U>(inner), static_cast<U>(size), report);
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
  const Report report = bad_index_report("index_select", device, dim);
  if (out.numel() == 0 || x.dim() == 0) {  // nothing gathered: the index checked alone
    if (m > 0) launch_check<I>(index, size, device, report, op);
    if (out.numel() > 0) copy_convert(x, out, op);  // a 0-dim input with its one index
    return;
  }
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  with_packed_out(out, op, [&](const Tensor& o) {
    const bool narrow = x.numel() < (int64_t{1} << 31) && o.numel() < (int64_t{1} << 31);
    auto go = [&](auto elem) {
      using E = decltype(elem);
      if (narrow)
        launch_gather<E, I, uint32_t>(o, x, index, m, inner, size, device, report, op);
      else
        launch_gather<E, I, uint64_t>(o, x, index, m, inner, size, device, report, op);
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
