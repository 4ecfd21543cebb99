// CPU MaxPool2d and AvgPool2d over the last two dims of [N, C, H, W] or [C, H, W], with
// attrs.kernel, attrs.stride and attrs.padding. Max ignores the padding and propagates
// NaN; average counts the padding as zeros (PyTorch's count_include_pad=True, so the
// divisor is always kH * kW). 16-bit inputs compute in float. Parallel over planes.
// MaxPool2dBackward (grad, x) -> dx: max pooling's gradient, one pass over each plane.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
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

// The larger of a and b, NaN if either is (a NaN a is kept: b > NaN is false).
template <class C>
inline C nan_max(C a, C b) {
  return (b > a || b != b) ? b : a;
}

// One output row of a max pool: acc[ow] (compute type, out_w entries) = the maximum of
// window ow over input rows [h_begin, h_end), NaN propagated. Windows wholly inside the
// row's width [lo, hi) run a branch-free loop per kernel tap (a select the vectorizer
// takes, no data-dependent branch: a maximum found by `if (v > best)` mispredicted about
// half the time on a ReLU'd image); the edge windows clip their taps.
template <class T, class C>
void max_row(const T* x, const PoolGeometry& g, int64_t h_begin, int64_t h_end, C* acc) {
  const int64_t first = g.pad_w, last = g.width + g.pad_w - g.kernel_w;  // ow*sW in [first, last]
  int64_t lo = (first + g.stride_w - 1) / g.stride_w;
  int64_t hi = last < 0 ? 0 : last / g.stride_w + 1;
  lo = std::min(lo, g.out_w);
  hi = std::max(std::min(hi, g.out_w), lo);
  constexpr C kLowest = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                             : std::numeric_limits<C>::lowest();
  std::fill(acc, acc + g.out_w, kLowest);
  for (int64_t h = h_begin; h < h_end; ++h) {
    const T* row = x + h * g.width;
    for (int64_t j = 0; j < g.kernel_w; ++j) {
      const T* src = row + j - g.pad_w;  // + ow * stride_w: inside the row for ow in [lo, hi)
      if (g.stride_w == 2) {
        for (int64_t ow = lo; ow < hi; ++ow) {
          const C v = static_cast<C>(src[2 * ow]);
          acc[ow] = nan_max(acc[ow], v);
        }
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) {
          const C v = static_cast<C>(src[ow * g.stride_w]);
          acc[ow] = nan_max(acc[ow], v);
        }
      }
    }
    for (int64_t ow = 0; ow < g.out_w; ow = ow + 1 == lo ? std::max(hi, ow + 1) : ow + 1) {
      if (ow >= lo && ow < hi) continue;
      const int64_t w0 = ow * g.stride_w - g.pad_w;
      const int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + g.kernel_w, g.width);
      for (int64_t w = w_begin; w < w_end; ++w) {
        const C v = static_cast<C>(row[w]);
        acc[ow] = nan_max(acc[ow], v);
      }
    }
  }
}

template <class T>
void pool_plane(const T* x, const PoolGeometry& g, PoolKind kind, T* y, compute_t<T>* acc) {
  using C = compute_t<T>;
  const double divisor = static_cast<double>(g.kernel_h * g.kernel_w);
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const int64_t h0 = oh * g.stride_h - g.pad_h;
    const int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + g.kernel_h, g.height);
    if (kind == PoolKind::Max && g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 &&
        g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0) {
      // The common 2x2 window, stride 2: each output one branch-free maximum of four.
      const T* r0 = x + 2 * oh * g.width;
      const T* r1 = r0 + g.width;
      T* out = y + oh * g.out_w;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const C a = nan_max(static_cast<C>(r0[2 * ow]), static_cast<C>(r0[2 * ow + 1]));
        const C b = nan_max(static_cast<C>(r1[2 * ow]), static_cast<C>(r1[2 * ow + 1]));
        out[ow] = to_element<T>(nan_max(a, b));
      }
      continue;
    }
    if (kind == PoolKind::Max) {
      max_row(x, g, h_begin, h_end, acc);
      for (int64_t ow = 0; ow < g.out_w; ++ow) y[oh * g.out_w + ow] = to_element<T>(acc[ow]);
      continue;
    }
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const int64_t w0 = ow * g.stride_w - g.pad_w;
      const int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + g.kernel_w, g.width);
      double sum = 0.0;
      for (int64_t h = h_begin; h < h_end; ++h)
        for (int64_t w = w_begin; w < w_end; ++w) sum += static_cast<double>(x[h * g.width + w]);
      y[oh * g.out_w + ow] = to_element<T>(sum / divisor);
    }
  }
}

// Max pooling's gradient for one plane: dx (zeroed here) gets each window's grad at the
// window's first maximum in row-major order over the positions inside the image (NaN
// counts as the maximum, its first one), as PyTorch's kernel picks it; overlapping
// windows add up.
template <class T>
void max_backward_plane(const T* grad, const T* x, const PoolGeometry& g, T* dx) {
  if (g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 &&
      g.pad_w == 0) {
    // The common 2x2 window, stride 2: windows do not overlap, so each writes its four
    // positions (grad or 0) outright; only a last odd row or column needs zeroing.
    if (g.height != 2 * g.out_h || g.width != 2 * g.out_w)
      std::fill(dx, dx + g.height * g.width, T(0));
    // Branch-free (the comparisons' outcomes are data: branches mispredicted ~1.8 ms on
    // the bench CNN's pool): m is the window's maximum (NaN if any), the first element
    // equal to it (or NaN) takes the gradient, the others get 0 through a bit mask.
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    auto pick = [](T v, Bits mask) { return std::bit_cast<T>(std::bit_cast<Bits>(v) & mask); };
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const T* r0 = x + 2 * oh * g.width;
      const T* r1 = r0 + g.width;
      T* d0 = dx + 2 * oh * g.width;
      T* d1 = d0 + g.width;
      const T* gr = grad + oh * g.out_w;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        const T m = nan_max(nan_max(a, b), nan_max(c, d));
        const Bits ea = -Bits((a == m) | (a != a)), eb = -Bits((b == m) | (b != b));
        const Bits ec = -Bits((c == m) | (c != c));
        const T v = gr[ow];
        d0[2 * ow] = pick(v, ea);
        d0[2 * ow + 1] = pick(v, ~ea & eb);
        d1[2 * ow] = pick(v, ~ea & ~eb & ec);
        d1[2 * ow + 1] = pick(v, ~ea & ~eb & ~ec);
      }
    }
    return;
  }
  std::fill(dx, dx + g.height * g.width, T(0));
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const int64_t h0 = oh * g.stride_h - g.pad_h;
    const int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + g.kernel_h, g.height);
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const int64_t w0 = ow * g.stride_w - g.pad_w;
      const int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + g.kernel_w, g.width);
      int64_t at = h_begin * g.width + w_begin;
      T best = x[at];
      for (int64_t h = h_begin; h < h_end; ++h) {
        for (int64_t w = w_begin; w < w_end; ++w) {
          const T v = x[h * g.width + w];
          const bool take = best == best && (v > best || v != v);  // a NaN best stays
          best = take ? v : best;
          at = take ? h * g.width + w : at;
        }
      }
      dx[at] += grad[oh * g.out_w + ow];
    }
  }
}

template <class T>
void max_backward(const Tensor& grad, const Tensor& x, const PoolGeometry& g, const Tensor& dst) {
  const int64_t planes = x.numel() / (g.height * g.width);
  const int64_t in_plane = g.height * g.width, out_plane = g.out_h * g.out_w;
  const int64_t plane_work = std::max<int64_t>(out_plane * g.kernel_h * g.kernel_w + in_plane, 1);
  const T* gp = grad.data<T>();
  const T* xp = x.data<T>();
  T* dx = dst.data<T>();
  parallel_for(0, planes, std::max<int64_t>(1, (int64_t{1} << 15) / plane_work),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t p = lo; p < hi; ++p)
                   max_backward_plane(gp + p * out_plane, xp + p * in_plane, g, dx + p * in_plane);
               });
}

}  // namespace

void pool2d(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  if (call.op == OpId::MaxPool2dBackward) {
    // 16-bit values compute in float (one rounding of each sum, as col2im's).
    const DType dtype = compute_dtype(out.dtype());
    const Tensor grad = kernel_contiguous(call.inputs[0], dtype);
    const Tensor x = kernel_contiguous(call.inputs[1], dtype);
    const PoolGeometry g{x.size(-2),           x.size(-1),           grad.size(-2),
                         grad.size(-1),        call.attrs.kernel[0], call.attrs.kernel[1],
                         call.attrs.stride[0], call.attrs.stride[1], call.attrs.padding[0],
                         call.attrs.padding[1]};
    with_output(out, dtype, [&](const Tensor& dst) {
      if (dtype == DType::Float64)
        max_backward<double>(grad, x, g, dst);
      else
        max_backward<float>(grad, x, g, dst);
    });
    return;
  }
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
                     auto acc = std::make_unique<compute_t<T>[]>(static_cast<size_t>(g.out_w));
                     for (int64_t p = lo; p < hi; ++p)
                       pool_plane(xp + p * in_plane, g, kind, y + p * out_plane, acc.get());
                   });
    });
  });
}

}  // namespace kiln::cpu
