// CUDA kernels of the fused attention ops (ops/attention_layout.h).
//  - attention: the FlashAttention-2 forward of ops/cuda/attention_kernels.cuh (tensor
//    cores; float32 through 3xTF32) for the inputs attention_cuda_supports accepts;
//    scaled_dot_product_attention sends the rest to the composite.
//    Dropout (scalars 1-3) inside the kernel, its mask drawn from the (seed, offset).
//  - attention_output: the first L rows of each packed entry, a strided copy.
//  - attention_backward: float32, for what attention_cuda_backward_supports accepts (the
//    rule takes the unfused gradient else): head size 64 on tensor cores
//    (ops/cuda/attention_backward_tf32.cuh), 128 in plain float32
//    (ops/cuda/attention_backward_kernels.cuh).
#include "ops/api.h"
#include "ops/attention_layout.h"
#include "ops/cuda/attention_backward_tf32.cuh"
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
// The (batch, head, row) strides of t.
void row_strides(const Tensor& t, int64_t* sb, int64_t* sh, int64_t* sr) {
  batch_strides(t, sb, sh);
  *sr = t.stride(-2);
}
int heads_of(const Tensor& q) { return q.dim() >= 3 ? static_cast<int>(q.size(q.dim() - 3)) : 1; }
int batch_of(const Tensor& q) { return q.dim() == 4 ? static_cast<int>(q.size(0)) : 1; }
// Elements of dtype d in one packed entry, and where its dropout bits start
// (attention_stores_mask; words stays 0 without them).
int64_t packed_entry(const OpCall& call, const AttentionShape& s, DType d, int64_t* mask_offset,
                     int* mask_words) {
  if (attention_stores_mask(call)) {
    *mask_offset = (s.L + attention_lse_rows(s.L, s.Ev, d)) * s.Ev;
    *mask_words = static_cast<int>((s.S + 31) / 32);
  }
  return attention_packed_rows(call, s.L, s.S, s.Ev, d) * s.Ev;
}

// From the metadata only (data_ptr() would make a pending traced value run now): storages
// start 512-byte aligned (the caching allocator) and a trace's arena values at multiples
// of 64 bytes, so the offset decides.
bool aligned_rows(const Tensor& t) {
  const int64_t vec = 16 / t.element_size();
  if (t.stride(-1) != 1 || t.storage_offset() % vec != 0) return false;
  for (int64_t d = 0; d < t.dim() - 1; ++d)
    if (t.size(d) > 1 && t.stride(d) % vec != 0) return false;
  return true;
}

// At launch, where the pointers are real: the 16-byte loads need them aligned.
bool aligned_pointers(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v})
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;
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
  // The kernels' grids count 64-row tiles of q (forward) and k (backward) in blockIdx.y.
  constexpr int64_t kMaxRows = int64_t{65535} * 64;
  if (q.size(-2) > kMaxRows || k.size(-2) > kMaxRows) return false;
  return aligned_rows(q) && aligned_rows(k) && aligned_rows(v);
}

bool attention_cuda_backward_supports(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& mask) {
  return q.dtype() == DType::Float32 && attention_cuda_supports(q, k, v, mask);
}

namespace {

__global__ void write_random_state(RandomStateWords w) {
  uint64_t* slot = reinterpret_cast<uint64_t*>(w.v[0]);
  slot[0] = static_cast<uint64_t>(w.v[1]);
  slot[1] = static_cast<uint64_t>(w.v[2]);
}

}  // namespace

void* write_random_state_kernel() { return reinterpret_cast<void*>(&write_random_state); }

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

attn::Dropout dropout_of(const OpCall& call) {
  attn::Dropout d;
  if (call.scalars.size() < 4) return d;
  const double p = call.scalars[1].to_double();
  d.p = static_cast<float>(p);
  d.keep_scale = static_cast<float>(1.0 / (1.0 - p));
  d.seed = static_cast<uint64_t>(call.scalars[2].to_int());
  d.offset = static_cast<uint64_t>(call.scalars[3].to_int());
  d.slot = RandomStateSlot::current();
  return d;
}

template <class T, class Raw>
void forward(const OpCall& call, const Tensor& out) {
  const AttentionShape s = attention_shape(call);
  const Tensor &q = call.inputs[0], &k = call.inputs[1], &v = call.inputs[2];
  KILN_CHECK(attention_cuda_supports(q, k, v, s.has_mask ? call.inputs[3] : Tensor()) &&
                 aligned_pointers(q, k, v),
             Error,
             "[attention] the CUDA kernel does not take these inputs (see "
             "attention_cuda_supports); scaled_dot_product_attention uses the composite for them");
  attn::FwdParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  row_strides(q, &p.q_sb, &p.q_sh, &p.q_sr);
  row_strides(k, &p.k_sb, &p.k_sh, &p.k_sr);
  row_strides(v, &p.v_sb, &p.v_sh, &p.v_sr);
  p.out_batch = packed_entry(call, s, out.dtype(), &p.mask_offset, &p.mask_words);
  p.heads = heads_of(q);
  const int batch = batch_of(q);
  p.L = static_cast<int>(s.L);
  p.S = static_cast<int>(s.S);
  p.scale_log2 = static_cast<float>(call.scalars[0].to_double() * 1.4426950408889634);
  p.dropout = dropout_of(call);
  const int device = out.device().index;
  DeviceScope scope(device);
  const cudaError_t e =
      s.E == 64 ? attn::launch_forward<Raw, 64>(p, batch, call.attrs.causal, stream_of(device))
                : attn::launch_forward<Raw, 128>(p, batch, call.attrs.causal, stream_of(device));
  check(e, "attention", "the forward kernel launch");
}

// attention_backward (grad, packed, q, k, v): float32 only.
void backward(const OpCall& call, const Tensor& out) {
  const AttentionShape s = attention_shape(call);
  const Tensor &g = call.inputs[0], &packed = call.inputs[1];
  const Tensor &q = call.inputs[2], &k = call.inputs[3], &v = call.inputs[4];
  KILN_CHECK(attention_cuda_backward_supports(q, k, v, s.has_mask ? call.inputs[5] : Tensor()) &&
                 aligned_pointers(q, k, v) && g.stride(-1) == 1 && g.dim() == q.dim() &&
                 packed.is_contiguous(),
             Error,
             "[attention_backward] the CUDA kernel does not take these inputs (see "
             "attention_cuda_backward_supports); the backward rule takes the unfused gradient");
  attn::BwdParams p{};
  p.q = q.data<float>();
  p.k = k.data<float>();
  p.v = v.data<float>();
  p.grad = g.data<float>();
  row_strides(q, &p.q_sb, &p.q_sh, &p.q_sr);
  row_strides(k, &p.k_sb, &p.k_sh, &p.k_sr);
  row_strides(v, &p.v_sb, &p.v_sh, &p.v_sr);
  row_strides(g, &p.g_sb, &p.g_sh, &p.g_sr);
  p.grad_vec = reinterpret_cast<uintptr_t>(p.grad) % 16 == 0 && p.g_sr % 4 == 0 &&
               p.g_sb % 4 == 0 && p.g_sh % 4 == 0;
  p.packed = packed.data<float>();
  p.packed_batch = packed_entry(call, s, DType::Float32, &p.mask_offset, &p.mask_words);
  p.heads = heads_of(q);
  p.dq = out.data<float>();
  if (out.dim() == 5) {  // interleaved [B, L, 3, H, E]
    p.o_sb = out.stride(0);
    p.o_sr = out.stride(1);
    p.o_sh = out.stride(3);
    p.dk = p.dq + out.stride(2);
    p.dv = p.dq + 2 * out.stride(2);
  } else {  // [B..., L + 2S, E]
    batch_strides(out, &p.o_sb, &p.o_sh);
    p.o_sr = s.E;
    p.dk = p.dq + s.L * s.E;
    p.dv = p.dk + s.S * s.E;
  }
  const int batch = batch_of(q);
  p.L = static_cast<int>(s.L);
  p.S = static_cast<int>(s.S);
  p.scale = static_cast<float>(call.scalars[0].to_double());
  p.dropout = dropout_of(call);
  const int device = out.device().index;
  DeviceScope scope(device);
  const cudaError_t e =
      s.E == 64 ? attn::tf32_bwd::launch(p, batch, call.attrs.causal, stream_of(device))
                : attn::launch_backward<128>(p, batch, call.attrs.causal, stream_of(device));
  check(e, "attention_backward", "the backward kernel launch");
}

template <class T>
void output(const OpCall& call, const Tensor& out) {
  const AttentionShape s = attention_shape(call);
  const int64_t block = s.L * s.Ev, n = s.batch_count * block;
  const int64_t stride = attention_packed_rows(call, s.L, s.S, s.Ev, out.dtype()) * s.Ev;
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
  if (call.op == OpId::AttentionBackward) return cuda_impl::backward(call, out);
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
