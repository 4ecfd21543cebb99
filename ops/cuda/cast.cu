// Cast and strided copies: dst = convert(src) for any pair of dtypes and any strides.
// Same dtype, both dense: one cudaMemcpyAsync. Both dense: a vectorized typed kernel per
// (src, dst) type pair. Same dtype, transposing: 32 x 32 shared-memory tiles
// (ops/cuda/transpose.cu); otherwise a typed strided kernel. Across dtypes, strided: the
// dynamic strided engine, computing in src's own element type so that the conversion is a
// single direct one (int64 -> int32 never goes through floating point).
#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"

namespace kiln::cuda_impl {
namespace {

struct Identity {
  template <class T>
  __device__ T operator()(T v) const {
    return v;
  }
};

// The contiguous kernel computes in compute_t<In>, which for 16-bit floats is float:
// converting via float is exact for every destination type, so results match the strided
// path's direct conversion.
template <class In>
bool copy_dense(const Tensor& src, const Tensor& dst, const char* op) {
  return visit_dtype(dst.dtype(), [&](auto out_tag) {
    using Out = decltype(out_tag);
    return try_launch_contiguous<Out, In, 1>(dst, {&src}, Identity{}, op);
  });
}

}  // namespace

void copy_convert(const Tensor& src, const Tensor& dst, const char* op) {
  KILN_CHECK(src.sizes() == dst.sizes(), Error, "[", op, "] internal: copy of ",
             dims_str(src.sizes()), " into ", dims_str(dst.sizes()));
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int device = dst.device().index;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.data_ptr() == dst.data_ptr()) return;
    DeviceScope scope(device);
    check(
        cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(n * dst.element_size()),
                        cudaMemcpyDeviceToDevice, stream_of(device)),
        op, "cudaMemcpyAsync");
    return;
  }
  visit_dtype(src.dtype(), [&](auto in_tag) {
    using In = decltype(in_tag);
    if (copy_dense<In>(src, dst, op)) return;
    if (try_transpose_copy(src, dst, op)) return;
    if (try_launch_strided_typed<In, In, 1>(dst, {&src}, Identity{}, op)) return;
    launch_strided<In, 1>(dst, {&src}, Identity{}, op);
  });
}

}  // namespace kiln::cuda_impl
