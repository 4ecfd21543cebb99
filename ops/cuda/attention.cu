// CUDA kernels of the fused attention ops (ops/attention_layout.h).
//  - attention: the FlashAttention-2 forward of ops/cuda/attention_kernels.cuh (tensor
//    cores; float32 through 3xTF32) for the inputs attention_cuda_supports accepts;
//    scaled_dot_product_attention sends the rest to the composite.
//  - attention_output: the first L rows of each packed entry, a strided copy.
//  - attention_backward: none yet; the rule (ops/autograd/rules_attention.cpp) takes
//    the unfused gradient on CUDA.
#include "ops/api.h"
#include "ops/attention_layout.h"
#include "ops/cuda/attention_kernels.cuh"
#include "ops/cuda/common.cuh"

namespace kiln {
namespace {

// Strides of the (batch, head) dims of t ([..., rows, D] with at most 2 batch dims).
void batch_strides(const Tensor& t, int64_t* sb, int64_t* sh) {
  const int64_t nb = t.dim() - 2;
  *sb = nb == 2 ? t.stride(0) : 0;
  *sh = nb >= 1 ? t.stride(nb - 1) : 0;
}

bool aligned_rows(const Tensor& t) {
  const int64_t vec = 16 / t.element_size();
  if (t.stride(-1) != 1 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  for (int64_t d = 0; d < t.dim() - 1; ++d)
    if (t.size(d) > 1 && t.stride(d) % vec != 0) return false;
  return true;
}

}  // namespace

bool attention_cuda_supports(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& mask) {
  const DType d = q.dtype();
  if (!q.device().is_cuda() || mask.defined() || q.dim() > 4) return false;
  if (d != DType::Float32 && d != DType::BFloat16 && d != DType::Float16) return false;
  if (k.dtype() != d || v.dtype() != d) return false;
  const int64_t e = q.size(-1);
  if ((e != 64 && e != 128) || k.size(-1) != e || v.size(-1) != e) return false;
  if (q.size(-2) > (int64_t{1} << 30) || k.size(-2) > (int64_t{1} << 30)) return false;
  return aligned_rows(q) && aligned_rows(k) && aligned_rows(v);
}

namespace cuda_impl {
namespace {

template <class T>
__global__ void copy_rows_kernel(const T* src, T* dst, int64_t block, int64_t src_stride,
                                 int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t b = i / block;
    dst[i] = src[b * src_stride + (i - b * block)];
  }
}

template <class T, class Raw>
void forward(const OpCall& call, const Tensor& out) {
  const AttentionShape s = attention_shape(call);
  const Tensor &q = call.inputs[0], &k = call.inputs[1], &v = call.inputs[2];
  KILN_CHECK(attention_cuda_supports(q, k, v, s.has_mask ? call.inputs[3] : Tensor()), Error,
             "[attention] the CUDA kernel does not take these inputs (see "
             "attention_cuda_supports); scaled_dot_product_attention uses the composite for them");
  attn::FwdParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  batch_strides(q, &p.q_sb, &p.q_sh);
  batch_strides(k, &p.k_sb, &p.k_sh);
  batch_strides(v, &p.v_sb, &p.v_sh);
  p.q_sr = q.stride(-2);
  p.k_sr = k.stride(-2);
  p.v_sr = v.stride(-2);
  p.out_batch = (s.L + attention_lse_rows(s.L, s.Ev, out.dtype())) * s.Ev;
  p.heads = q.dim() >= 3 ? static_cast<int>(q.size(q.dim() - 3)) : 1;
  const int batch = q.dim() == 4 ? static_cast<int>(q.size(0)) : 1;
  p.L = static_cast<int>(s.L);
  p.S = static_cast<int>(s.S);
  p.scale_log2 = static_cast<float>(call.scalars[0].to_double() * 1.4426950408889634);
  const int device = out.device().index;
  DeviceScope scope(device);
  const cudaError_t e =
      s.E == 64 ? attn::launch_forward<Raw, 64>(p, batch, call.attrs.causal, stream_of(device))
                : attn::launch_forward<Raw, 128>(p, batch, call.attrs.causal, stream_of(device));
  check(e, "attention", "the forward kernel launch");
}

template <class T>
void output(const OpCall& call, const Tensor& out) {
  const AttentionShape s = attention_shape(call);
  const int64_t block = s.L * s.Ev, n = s.batch_count * block;
  const int64_t stride = (s.L + attention_lse_rows(s.L, s.Ev, out.dtype())) * s.Ev;
  const int device = out.device().index;
  DeviceScope scope(device);
  copy_rows_kernel<T><<<grid_for(n, 256, 4, device), 256, 0, stream_of(device)>>>(
      call.inputs[0].data<T>(), out.data<T>(), block, stride, n);
  check(cudaGetLastError(), "attention_output", "the copy kernel launch");
}

}  // namespace
}  // namespace cuda_impl

namespace cuda {

void attention(const OpCall& call, const Tensor& out) {
  KILN_CHECK(call.op != OpId::AttentionBackward, Error,
             "[attention_backward] has no CUDA kernel; the attention_output rule takes the "
             "unfused gradient on CUDA");
  cuda_impl::visit_floating(out.dtype(), call.name(), [&](auto tag) {
    using T = decltype(tag);
    if (call.op == OpId::AttentionOutput) {
      cuda_impl::output<T>(call, out);
    } else if constexpr (std::is_same_v<T, float>) {
      cuda_impl::forward<T, float>(call, out);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      cuda_impl::forward<T, __nv_bfloat16>(call, out);
    } else if constexpr (std::is_same_v<T, Half>) {
      cuda_impl::forward<T, __half>(call, out);
    } else {
      throw DTypeError("[attention] the CUDA kernel does not support float64");
    }
  });
}

}  // namespace cuda
}  // namespace kiln
