// max_pool2d / avg_pool2d over x [N, C, H, W] or [C, H, W] with attrs.kernel, .stride,
// .padding (filled in by the dispatcher; no dilation, floor mode). One thread per output
// element reading x through its strides (no packing). Max ignores the padding and
// propagates NaN; avg divides by kH * kW (count_include_pad = True). Computes in
// compute_t<T>.
#include <limits>

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {
namespace {

struct PoolGeom {
  int64_t c, h, w, ho, wo, kh, kw, sh, sw, ph, pw;
  int64_t sn, sc, sy, sx;  // x strides (sn = 0 for a 3-D input)
};

template <class T, bool IsMax>
__global__ void pool2d_kernel(const T* x, T* out, int64_t total, PoolGeom g) {
  using C = compute_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += step) {
    const int64_t ow = idx % g.wo;
    int64_t rest = idx / g.wo;
    const int64_t oh = rest % g.ho;
    rest /= g.ho;
    const int64_t c = rest % g.c, n = rest / g.c;
    const T* p = x + n * g.sn + c * g.sc;
    const int64_t y0 = oh * g.sh - g.ph, x0 = ow * g.sw - g.pw;
    C acc = IsMax ? -std::numeric_limits<C>::infinity() : C(0);
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t yy = y0 + i;
      if (yy < 0 || yy >= g.h) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t xx = x0 + j;
        if (xx < 0 || xx >= g.w) continue;
        const C v = widen(p[yy * g.sy + xx * g.sx]);
        if constexpr (IsMax) {
          if (v > acc || v != v) acc = v;
          if (acc != acc) break;
        } else {
          acc += v;
        }
      }
      if constexpr (IsMax) {
        if (acc != acc) break;
      }
    }
    if constexpr (!IsMax) acc /= static_cast<C>(g.kh * g.kw);
    out[idx] = convert<T>(acc);
  }
}

template <class T>
void run(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  const Tensor& x = call.inputs[0];
  const bool batched = x.dim() == 4;
  const auto& a = call.attrs;
  PoolGeom g{x.size(-3),   x.size(-2),   x.size(-1),   out.size(-2),
             out.size(-1), a.kernel[0],  a.kernel[1],  a.stride[0],
             a.stride[1],  a.padding[0], a.padding[1], batched ? x.stride(0) : 0,
             x.stride(-3), x.stride(-2), x.stride(-1)};
  const int device = out.device().index;
  const bool convert_first = x.dtype() != out.dtype();
  const Tensor xin = convert_first ? packed(x, out.dtype()) : x;
  if (convert_first) {  // packed: dense strides
    g.sn = batched ? g.c * g.h * g.w : 0;
    g.sc = g.h * g.w;
    g.sy = g.w;
    g.sx = 1;
  }
  DeviceScope scope(device);
  with_packed_out(out, op, [&](const Tensor& o) {
    const int64_t total = o.numel();
    const int grid = grid_for(total, 256, 1, device);
    const T* xp = static_cast<const T*>(xin.data_ptr());
    T* yp = static_cast<T*>(o.data_ptr());
    if (call.op == OpId::MaxPool2d)
      pool2d_kernel<T, true><<<grid, 256, 0, stream_of(device)>>>(xp, yp, total, g);
    else
      pool2d_kernel<T, false><<<grid, 256, 0, stream_of(device)>>>(xp, yp, total, g);
    cuda_context::check_last_launch(op);
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void pool2d(const OpCall& call, const Tensor& out) {
  // Max pooling's gradient on CUDA is the composite (ops/autograd/rules_linalg.cpp).
  KILN_CHECK(call.op != OpId::MaxPool2dBackward, ValueError,
             "[max_pool2d_backward] runs on the CPU only");
  cuda_impl::visit_floating(out.dtype(), call.name(),
                            [&](auto tag) { cuda_impl::run<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
