// CPU Conv2d (groups 1, dilation 1): x [N, C, H, W] or [C, H, W], weight [O, C, kH, kW],
// optional bias [O], attrs.stride and attrs.padding (zeros outside the input).
//
// Per image: im2col gathers the input patches into columns [C*kH*kW, oH*oW], then one
// GEMM computes out_n [O, oH*oW] = weight [O, C*kH*kW] @ columns, starting from the
// bias when there is one. A 1x1 kernel with stride 1 and no padding reads the image
// itself as the columns. Small per-image products run in parallel over the batch
// with one single-threaded GEMM each; large ones run one after the other, with im2col
// parallel over channels and the GEMM split over the threads (ops/cpu/blas_gemm.h).
// 16-bit inputs compute in float32.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/blas_gemm.h"
#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

struct ConvGeometry {
  int64_t channels, height, width;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int64_t out_h, out_w;

  int64_t patch_size() const { return channels * kernel_h * kernel_w; }
  int64_t out_pixels() const { return out_h * out_w; }
  bool is_pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 &&
           pad_w == 0;
  }
};

// columns[(c*kH + i)*kW + j][oh*oW + ow] = x[c][oh*sH - pH + i][ow*sW - pW + j], or 0,
// for channels c in [first, last).
template <class T>
void im2col(const T* image, const ConvGeometry& g, int64_t first, int64_t last, T* columns) {
  const int64_t pixels = g.out_pixels();
  for (int64_t c = first; c < last; ++c) {
    const T* plane = image + c * g.height * g.width;
    for (int64_t i = 0; i < g.kernel_h; ++i) {
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        T* row = columns + ((c * g.kernel_h + i) * g.kernel_w + j) * pixels;
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          T* dst = row + oh * g.out_w;
          const int64_t ih = oh * g.stride_h - g.pad_h + i;
          if (ih < 0 || ih >= g.height) {
            std::fill(dst, dst + g.out_w, T(0));
            continue;
          }
          const T* src = plane + ih * g.width;
          for (int64_t ow = 0; ow < g.out_w; ++ow) {
            const int64_t iw = ow * g.stride_w - g.pad_w + j;
            dst[ow] = iw >= 0 && iw < g.width ? src[iw] : T(0);
          }
        }
      }
    }
  }
}

template <class T>
void conv2d_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeometry& g,
                  int64_t batch, int64_t out_channels, const Tensor& dst) {
  const T* xp = x.data<T>();
  const T* bias_data = bias.defined() ? bias.data<T>() : nullptr;
  T* y = dst.data<T>();
  const int64_t patch = g.patch_size(), pixels = g.out_pixels();
  const int64_t image_size = g.channels * g.height * g.width;
  const GemmOperand filters{weight.data_ptr(), out_channels, patch, patch, 1};

  // Parallel over images (single-threaded GEMMs), or within one image: im2col over
  // channels, then the GEMM split by gemm() itself.
  const int64_t work = std::max<int64_t>(out_channels * patch * pixels, 1);
  const bool parallel_images = work <= kSplitGemmWork;
  auto run_images = [&](int64_t lo, int64_t hi) {
    std::vector<T> columns(g.is_pointwise() ? 0 : static_cast<size_t>(patch * pixels));
    for (int64_t n = lo; n < hi; ++n) {
      const T* image = xp + n * image_size;
      if (parallel_images) {
        if (!g.is_pointwise()) im2col(image, g, 0, g.channels, columns.data());
      } else if (!g.is_pointwise()) {
        parallel_for(0, g.channels, 1, [&](int64_t first, int64_t last) {
          im2col(image, g, first, last, columns.data());
        });
      }
      const GemmOperand patches{g.is_pointwise() ? image : columns.data(), patch, pixels, pixels,
                                1};
      T* out_image = y + n * out_channels * pixels;
      if (bias_data) {
        for (int64_t o = 0; o < out_channels; ++o)
          std::fill(out_image + o * pixels, out_image + (o + 1) * pixels, bias_data[o]);
      }
      gemm(dtype_of<T>(), filters, patches, out_image, pixels, bias_data != nullptr);
    }
  };
  if (parallel_images) {
    parallel_for(0, batch, 1, run_images);
  } else {
    run_images(0, batch);
  }
}

}  // namespace

void conv2d(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const Tensor& x_in = call.inputs[0];
  const DType dtype = compute_dtype(x_in.dtype());
  const Tensor x = kernel_contiguous(x_in, dtype);
  const Tensor weight = kernel_contiguous(call.inputs[1], dtype);
  const Tensor bias = call.inputs.size() >= 3 && call.inputs[2].defined()
                          ? kernel_contiguous(call.inputs[2], dtype)
                          : Tensor();
  ConvGeometry g;
  g.channels = x.size(-3);
  g.height = x.size(-2);
  g.width = x.size(-1);
  g.kernel_h = weight.size(2);
  g.kernel_w = weight.size(3);
  g.stride_h = call.attrs.stride[0];
  g.stride_w = call.attrs.stride[1];
  g.pad_h = call.attrs.padding[0];
  g.pad_w = call.attrs.padding[1];
  g.out_h = out.size(-2);
  g.out_w = out.size(-1);
  const int64_t batch = x.dim() == 4 ? x.size(0) : 1;
  with_output(out, dtype, [&](const Tensor& dst) {
    if (dtype == DType::Float64) {
      conv2d_typed<double>(x, weight, bias, g, batch, weight.size(0), dst);
    } else {
      conv2d_typed<float>(x, weight, bias, g, batch, weight.size(0), dst);
    }
  });
}

}  // namespace kiln::cpu
