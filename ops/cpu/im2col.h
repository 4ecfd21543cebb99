// CPU patch layout shared by conv2d and the Unfold family (im2col / col2im): one image
// [C, H, W] <-> columns [C*kH*kW, oH*oW], row (c*kH + i)*kW + j, column oh*oW + ow
// holding x[c][oh*sH - pH + i][ow*sW - pW + j] (pad outside the image).
#pragma once

#include <algorithm>
#include <cstdint>

namespace kiln::cpu {

struct PatchGeometry {
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

// Gathers the patches of channels [first, last) into columns.
template <class T>
void im2col(const T* image, const PatchGeometry& g, int64_t first, int64_t last, T* columns,
            T pad = T(0)) {
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
            std::fill(dst, dst + g.out_w, pad);
            continue;
          }
          const T* src = plane + ih * g.width;
          for (int64_t ow = 0; ow < g.out_w; ++ow) {
            const int64_t iw = ow * g.stride_w - g.pad_w + j;
            dst[ow] = iw >= 0 && iw < g.width ? src[iw] : pad;
          }
        }
      }
    }
  }
}

// The adjoint: adds every column entry back onto its image position (padding dropped)
// for channels [first, last); image must start zeroed.
template <class T>
void col2im(const T* columns, const PatchGeometry& g, int64_t first, int64_t last, T* image) {
  const int64_t pixels = g.out_pixels();
  for (int64_t c = first; c < last; ++c) {
    T* plane = image + c * g.height * g.width;
    for (int64_t i = 0; i < g.kernel_h; ++i) {
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        const T* row = columns + ((c * g.kernel_h + i) * g.kernel_w + j) * pixels;
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          const int64_t ih = oh * g.stride_h - g.pad_h + i;
          if (ih < 0 || ih >= g.height) continue;
          T* dst = plane + ih * g.width;
          for (int64_t ow = 0; ow < g.out_w; ++ow) {
            const int64_t iw = ow * g.stride_w - g.pad_w + j;
            if (iw >= 0 && iw < g.width) dst[iw] += row[oh * g.out_w + ow];
          }
        }
      }
    }
  }
}

}  // namespace kiln::cpu
