// CUDA patch layout shared by conv2d and the Unfold family: images [B, C, H, W] <->
// columns [B, C*kH*kW, oH*oW], col[b, (c, i, j), (oh, ow)] = x[b, c, oh*sH - pH + i,
// ow*sW - pW + j] (pad outside the image). col2im is the deterministic adjoint: each
// image element gathers (sums) the column entries that read it, no atomics.
#pragma once

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {

struct PatchGeom {
  int64_t c, h, w, kh, kw, sh, sw, ph, pw, ho, wo;
};

// U: unsigned index type wide enough for every index (32-bit when possible).
template <class T, class U>
__global__ void im2col_kernel(const T* x, T* col, U total, PatchGeom g, T pad) {
  const U L = static_cast<U>(g.ho * g.wo), K = static_cast<U>(g.c * g.kh * g.kw);
  const U khw = static_cast<U>(g.kh * g.kw);
  const U step = static_cast<U>(gridDim.x) * blockDim.x;
  for (U idx = static_cast<U>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const U l = idx % L, rest = idx / L;
    const U kk = rest % K, b = rest / K;
    const U c = kk / khw, ij = kk % khw;
    const U i = ij / static_cast<U>(g.kw), j = ij % static_cast<U>(g.kw);
    const U oh = l / static_cast<U>(g.wo), ow = l % static_cast<U>(g.wo);
    const int64_t ih = static_cast<int64_t>(oh) * g.sh - g.ph + static_cast<int64_t>(i);
    const int64_t iw = static_cast<int64_t>(ow) * g.sw - g.pw + static_cast<int64_t>(j);
    T v = pad;
    if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
      v = x[((static_cast<int64_t>(b) * g.c + static_cast<int64_t>(c)) * g.h + ih) * g.w + iw];
    col[idx] = v;
  }
}

template <class T>
void im2col(const T* x, T* col, int64_t images, const PatchGeom& g, T pad, int device,
            const char* op) {
  const int64_t total = images * g.c * g.kh * g.kw * g.ho * g.wo;
  if (total == 0) return;
  const int grid = grid_for(total, 256, 1, device);
  if (total < (int64_t{1} << 32))
    im2col_kernel<T, uint32_t>
        <<<grid, 256, 0, stream_of(device)>>>(x, col, static_cast<uint32_t>(total), g, pad);
  else
    im2col_kernel<T, uint64_t>
        <<<grid, 256, 0, stream_of(device)>>>(x, col, static_cast<uint64_t>(total), g, pad);
  cuda_context::check_last_launch(op);
}

}  // namespace kiln::cuda_impl
