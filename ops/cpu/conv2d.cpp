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
#include "ops/cpu/im2col.h"
#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

using ConvGeometry = PatchGeometry;

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
