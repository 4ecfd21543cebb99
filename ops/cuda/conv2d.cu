// conv2d(x [N, C, H, W] or [C, H, W], weight [O, C, kH, kW], bias? [O]; attrs.stride,
// attrs.padding; dilation 1, groups 1) as im2col + cuBLAS gemm (ops/cuda/gemm.cuh).
//
// For a chunk of images, col[b, (c, i, j), (oh, ow)] = x[b, c, oh*sH - pH + i,
// ow*sW - pW + j] (0 in the padding); then out[b] [O, L] = weight [O, K] @ col[b] [K, L]
// as one strided-batched gemm (weight broadcast with batch stride 0). Chunks bound the
// col buffer to ~4M elements (16 MiB in float32): a compiled trace's CUDA graph keeps the
// temporaries of its library calls in its capture pool for as long as it lives, beside the
// trace's arena (bench/models/cnn.py at batch 128: conv2's buffer of all 128 images was 81
// MiB there, a third of the step's peak). A 1x1 kernel with stride 1 and no padding skips
// im2col (x itself is the [C, H*W] matrix). The bias is broadcast into out first and the
// gemm accumulates onto it.
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/im2col.cuh"

namespace kiln::cuda_impl {
namespace {

constexpr int64_t kColBudget = int64_t{4} << 20;  // elements per im2col chunk

template <class T>
void run(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  const DType dtype = out.dtype();
  const Tensor x = packed(call.inputs[0], dtype);
  const Tensor w = packed(call.inputs[1], dtype);
  const bool batched = x.dim() == 4;
  const int64_t n = batched ? x.size(0) : 1;
  PatchGeom g{x.size(-3),
              x.size(-2),
              x.size(-1),
              w.size(2),
              w.size(3),
              call.attrs.stride[0],
              call.attrs.stride[1],
              call.attrs.padding[0],
              call.attrs.padding[1],
              out.size(-2),
              out.size(-1)};
  const int64_t o_ch = w.size(0), k = g.c * g.kh * g.kw, l = g.ho * g.wo;
  const int device = out.device().index;
  const bool has_bias = call.inputs.size() > 2 && call.inputs[2].defined();
  DeviceScope scope(device);
  with_packed_out(out, op, [&](const Tensor& o) {
    if (has_bias) fill_bias(o, packed(call.inputs[2], dtype), o_ch, l, op);
    const MatrixArg wa{w.data_ptr(), k, 1, 0};
    T* y = static_cast<T*>(o.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    const bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
    if (direct) {  // x[b] is already the [C, H*W] matrix
      const MatrixArg xa{xp, l, 1, g.c * l};
      gemm(dtype, device, GemmShape{n, o_ch, l, k}, wa, xa, y, l, o_ch * l, has_bias, op);
      return;
    }
    int64_t chunk = k * l > 0 ? kColBudget / (k * l) : n;
    if (chunk < 1) chunk = 1;
    if (chunk > n) chunk = n;
    Tensor col = Tensor::make(Dims{chunk, k, l}, dtype, out.device());
    T* colp = static_cast<T*>(col.data_ptr());
    for (int64_t b0 = 0; b0 < n; b0 += chunk) {
      const int64_t nb = n - b0 < chunk ? n - b0 : chunk;
      im2col<T>(xp + b0 * g.c * g.h * g.w, colp, nb, g, T(0.0f), device, op);
      const MatrixArg ca{colp, l, 1, k * l};
      gemm(dtype, device, GemmShape{nb, o_ch, l, k}, wa, ca, y + b0 * o_ch * l, l, o_ch * l,
           has_bias, op);
    }
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void conv2d(const OpCall& call, const Tensor& out) {
  cuda_impl::visit_floating(out.dtype(), call.name(),
                            [&](auto tag) { cuda_impl::run<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
