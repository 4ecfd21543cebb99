// CPU MaxPool2d and AvgPool2d over the last two dims of [N, C, H, W] or [C, H, W], with
// attrs.kernel, attrs.stride and attrs.padding. Max ignores the padding and propagates
// NaN; average counts the padding as zeros (PyTorch's count_include_pad=True, so the
// divisor is always kH * kW). 16-bit inputs compute in float. Parallel over planes.
#include <algorithm>
#include <type_traits>

#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

enum class PoolKind { Max, Average };

struct PoolGeometry {
  int64_t height, width, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

template <class T>
void pool_plane(const T* x, const PoolGeometry& g, PoolKind kind, T* y) {
  using C = compute_t<T>;
  const double divisor = static_cast<double>(g.kernel_h * g.kernel_w);
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const int64_t h0 = oh * g.stride_h - g.pad_h;
    const int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + g.kernel_h, g.height);
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const int64_t w0 = ow * g.stride_w - g.pad_w;
      const int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + g.kernel_w, g.width);
      if (kind == PoolKind::Max) {
        C best = static_cast<C>(x[h_begin * g.width + w_begin]);
        for (int64_t h = h_begin; h < h_end; ++h) {
          for (int64_t w = w_begin; w < w_end; ++w) {
            const C v = static_cast<C>(x[h * g.width + w]);
            if (v > best || is_nan(v)) best = v;
            if (is_nan(best)) break;
          }
        }
        y[oh * g.out_w + ow] = to_element<T>(best);
      } else {
        double sum = 0.0;
        for (int64_t h = h_begin; h < h_end; ++h)
          for (int64_t w = w_begin; w < w_end; ++w) sum += static_cast<double>(x[h * g.width + w]);
        y[oh * g.out_w + ow] = to_element<T>(sum / divisor);
      }
    }
  }
}

}  // namespace

void pool2d(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const Tensor x = kernel_contiguous(call.inputs[0]);
  const PoolKind kind = call.op == OpId::MaxPool2d ? PoolKind::Max : PoolKind::Average;
  const PoolGeometry g{x.size(-2),           x.size(-1),           out.size(-2),
                       out.size(-1),         call.attrs.kernel[0], call.attrs.kernel[1],
                       call.attrs.stride[0], call.attrs.stride[1], call.attrs.padding[0],
                       call.attrs.padding[1]};
  const int64_t planes = x.numel() / (g.height * g.width);
  const int64_t in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
  const int64_t plane_work = out_plane * g.kernel_h * g.kernel_w;
  with_output(out, x.dtype(), [&](const Tensor& dst) {
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x.data<T>();
      T* y = dst.data<T>();
      parallel_for(0, planes,
                   std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(plane_work, 1)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t p = lo; p < hi; ++p)
                       pool_plane(xp + p * in_plane, g, kind, y + p * out_plane);
                   });
    });
  });
}

}  // namespace kiln::cpu
