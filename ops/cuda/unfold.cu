// CUDA kernels of the Unfold family: im2col (ops/cuda/im2col.cuh, with the call's fill
// value) and col2im, where each image element sums, in a fixed order and in float (or
// double), the column entries of the patches covering it: deterministic, no atomics.
#include "ops/cuda/im2col.cuh"

namespace kiln::cuda_impl {
namespace {

template <class T>
__global__ void col2im_kernel(const T* col, T* x, int64_t total, PatchGeom g) {
  using Acc = typename std::conditional<std::is_same<T, double>::value, double, float>::type;
  const int64_t L = g.ho * g.wo, K = g.c * g.kh * g.kw;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = idx % g.w, ih = (idx / g.w) % g.h;
    const int64_t c = (idx / (g.w * g.h)) % g.c, b = idx / (g.w * g.h * g.c);
    Acc sum = 0;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t th = ih + g.ph - i;
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.ho) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t tw = iw + g.pw - j;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.wo) continue;
        const int64_t row = (c * g.kh + i) * g.kw + j;
        sum += static_cast<Acc>(col[(b * K + row) * L + (th / g.sh) * g.wo + tw / g.sw]);
      }
    }
    x[idx] = static_cast<T>(sum);
  }
}

template <class T>
void run(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  const bool to_cols = call.op == OpId::Im2Col;
  const Tensor x = packed(call.inputs[0], out.dtype());
  const Tensor& image = to_cols ? x : out;
  PatchGeom g{image.size(1),
              image.size(2),
              image.size(3),
              call.attrs.kernel[0],
              call.attrs.kernel[1],
              call.attrs.stride[0],
              call.attrs.stride[1],
              call.attrs.padding[0],
              call.attrs.padding[1],
              0,
              0};
  g.ho = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.wo = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  const int device = out.device().index;
  DeviceScope scope(device);
  with_packed_out(out, op, [&](const Tensor& o) {
    const T* in = static_cast<const T*>(x.data_ptr());
    T* dst = static_cast<T*>(o.data_ptr());
    if (to_cols) {
      im2col<T>(in, dst, image.size(0), g,
                static_cast<T>(static_cast<float>(call.scalars[0].to_double())), device, op);
      return;
    }
    const int64_t total = o.numel();
    if (total == 0) return;
    col2im_kernel<T>
        <<<grid_for(total, 256, 1, device), 256, 0, stream_of(device)>>>(in, dst, total, g);
    cuda_context::check_last_launch(op);
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void unfold(const OpCall& call, const Tensor& out) {
  cuda_impl::visit_floating(out.dtype(), call.name(),
                            [&](auto tag) { cuda_impl::run<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
