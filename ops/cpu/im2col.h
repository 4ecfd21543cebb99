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

// The output columns [lo, hi) whose input column ow * stride - pad + j lies inside
// [0, width); the loops below copy (stride 1: contiguously) between them and fill or
// skip the rest, so the inner loops carry no bounds test and vectorize.
struct ValidColumns {
  int64_t lo, hi;
};
inline ValidColumns valid_columns(int64_t out_w, int64_t stride, int64_t pad, int64_t j,
                                  int64_t width) {
  const int64_t first = pad - j;             // ow * stride >= first
  const int64_t last = width + pad - j - 1;  // ow * stride <= last
  int64_t lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  int64_t hi = last < 0 ? 0 : last / stride + 1;
  lo = std::min(lo, out_w);
  hi = std::max(std::min(hi, out_w), lo);
  return {lo, hi};
}

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
        const ValidColumns v = valid_columns(g.out_w, g.stride_w, g.pad_w, j, g.width);
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          T* dst = row + oh * g.out_w;
          const int64_t ih = oh * g.stride_h - g.pad_h + i;
          if (ih < 0 || ih >= g.height) {
            std::fill(dst, dst + g.out_w, pad);
            continue;
          }
          const int64_t base = ih * g.width - g.pad_w + j;  // + ow * stride: the input
          std::fill(dst, dst + v.lo, pad);
          if (g.stride_w == 1) {
            std::copy(plane + base + v.lo, plane + base + v.hi, dst + v.lo);
          } else {
            for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow] = plane[base + ow * g.stride_w];
          }
          std::fill(dst + v.hi, dst + g.out_w, pad);
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
        const ValidColumns v = valid_columns(g.out_w, g.stride_w, g.pad_w, j, g.width);
        for (int64_t oh = 0; oh < g.out_h; ++oh) {
          const int64_t ih = oh * g.stride_h - g.pad_h + i;
          if (ih < 0 || ih >= g.height) continue;
          const int64_t base = ih * g.width - g.pad_w + j;  // + ow * stride: the image
          const T* src = row + oh * g.out_w;
          if (g.stride_w == 1) {
            T* dst = plane + base + v.lo;
            for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow - v.lo] += src[ow];
          } else {
            for (int64_t ow = v.lo; ow < v.hi; ++ow) plane[base + ow * g.stride_w] += src[ow];
          }
        }
      }
    }
  }
}

}  // namespace kiln::cpu
