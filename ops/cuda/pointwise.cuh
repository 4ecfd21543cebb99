// The pointwise engine of the CUDA backend: out[i] = f(in0[i], in1[i], ...) for 1 to 3
// inputs, used by unary, cast, clamp, binary, where and the strided copies.
//
// Two paths:
//  - contiguous: every operand dense with out's shape, inputs of one storage type In and
//    all pointers 16-byte aligned. Each thread moves 16-byte vectors (float4-sized) and
//    finishes the tail element by element; typed loads, no index math.
//  - strided: any strides (0 for broadcast, offsets, transposes, a strided out for
//    in-place ops) and any dtype per operand. Dims of size 1 are dropped and dims that are
//    contiguous for every operand are merged on the host; at most kMaxDims (8) may remain
//    (ShapeError otherwise). Sizes and strides travel by value in the kernel arguments;
//    the loops over dims are unrolled so they stay in registers. Loads and stores switch
//    on the run-time dtype (uniform across the warp) and convert through C.
//
// f is a device functor taking NIn values of the compute type C; its result is converted
// to out's element type. The caller picks C (compute_t of the computation dtype).
#pragma once

#include <array>

#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {

constexpr int kMaxDims = 8;
constexpr int kPointwiseThreads = 256;

// Offsets (in elements) of operand k for a linear index over the merged shape.
// Dims are stored innermost first. When every linear index fits 31 bits (`narrow`), the
// per-dim division is a multiply-high by a precomputed magic number (Granlund-Montgomery,
// as in PyTorch's IntDivider); otherwise a 64-bit division.
template <int N>
struct StridedIndexer {
  int ndim = 0;
  bool narrow = false;
  int64_t sizes[kMaxDims];
  uint32_t magic[kMaxDims];
  uint32_t shift[kMaxDims];
  int64_t strides[N][kMaxDims];

  __device__ __forceinline__ void offsets(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (narrow) {
      uint32_t l = static_cast<uint32_t>(linear);
#pragma unroll
      for (int d = 0; d < kMaxDims; ++d) {
        if (d == ndim) break;
        const uint32_t q = (__umulhi(l, magic[d]) + l) >> shift[d];
        const int64_t coord = static_cast<int64_t>(l - q * static_cast<uint32_t>(sizes[d]));
        l = q;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += coord * strides[k][d];
      }
      return;
    }
    uint64_t l = static_cast<uint64_t>(linear);
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      const uint64_t size = static_cast<uint64_t>(sizes[d]);
      const uint64_t q = l / size;
      const int64_t coord = static_cast<int64_t>(l - q * size);
      l = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += coord * strides[k][d];
    }
  }
};

// Magic number and shift for dividing 31-bit values by d (1 <= d < 2^31):
// n / d == (umulhi(n, magic) + n) >> shift.
inline void int_divider(uint32_t d, uint32_t* magic, uint32_t* shift) {
  uint32_t s = 0;
  while ((uint64_t{1} << s) < d) ++s;
  *shift = s;
  *magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
}

// Builds the indexer for a shape and one stride list per operand (each as long as sizes):
// drops size-1 dims, merges dims contiguous in every operand, checks the 8-dim limit.
template <int N>
StridedIndexer<N> make_indexer(const Dims& sizes, const std::array<Dims, N>& strides,
                               const char* op) {
  // Outer-to-inner working lists without size-1 dims.
  Dims sz;
  std::array<Dims, N> st;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    sz.push_back(sizes[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  // Merge from the innermost dim outwards.
  Dims msz;
  std::array<Dims, N> mst;
  for (size_t i = sz.size(); i-- > 0;) {
    bool merge = !msz.empty();
    for (int k = 0; k < N && merge; ++k) merge = st[k][i] == mst[k].back() * msz.back();
    if (merge) {
      msz.back() *= sz[i];
    } else {
      msz.push_back(sz[i]);
      for (int k = 0; k < N; ++k) mst[k].push_back(st[k][i]);
    }
  }
  KILN_CHECK(msz.size() <= static_cast<size_t>(kMaxDims), ShapeError, "[", op,
             "] the CUDA backend handles at most ", kMaxDims,
             " dims after merging contiguous ones, got ", msz.size(), " for shape ",
             dims_str(sizes));
  StridedIndexer<N> ix;
  ix.ndim = static_cast<int>(msz.size());
  ix.narrow = dims_numel(sizes) < (int64_t{1} << 31);
  for (int d = 0; d < kMaxDims; ++d) {
    const bool used = d < ix.ndim;
    ix.sizes[d] = used ? msz[d] : 1;
    ix.magic[d] = 1;
    ix.shift[d] = 0;
    if (used && ix.narrow) int_divider(static_cast<uint32_t>(msz[d]), &ix.magic[d], &ix.shift[d]);
    for (int k = 0; k < N; ++k) ix.strides[k][d] = used ? mst[k][d] : 0;
  }
  return ix;
}

// Strides of t broadcast to `sizes` (0 for broadcast and missing leading dims).
Dims broadcast_strides(const Tensor& t, const Dims& sizes);

template <class C, class F, int NIn>
__device__ __forceinline__ auto apply_fn(const F& f, const C (&v)[NIn]) {
  if constexpr (NIn == 1)
    return f(v[0]);
  else if constexpr (NIn == 2)
    return f(v[0], v[1]);
  else
    return f(v[0], v[1], v[2]);
}

template <int NOps>
struct StridedArgs {
  void* data[NOps];  // operand 0 is out
  DType dtype[NOps];
  StridedIndexer<NOps> index;
  int64_t n;
};

// Elements per thread per pass of the strided kernels (independent index math and loads
// in flight).
constexpr int kStridedUnroll = 4;

template <class C, int NIn, class F>
__global__ void __launch_bounds__(kPointwiseThreads)
    pointwise_strided_kernel(StridedArgs<NIn + 1> args, F f) {
  constexpr int U = kStridedUnroll;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * U;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * U + threadIdx.x;
       base < args.n; base += step) {
    int64_t off[U][NIn + 1];
    C v[U][NIn];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < args.n) {
        args.index.offsets(i, off[u]);
#pragma unroll
        for (int k = 0; k < NIn; ++k)
          v[u][k] = load_as<C>(args.data[k + 1], args.dtype[k + 1], off[u][k + 1]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + static_cast<int64_t>(u) * blockDim.x < args.n)
        store_as(args.data[0], args.dtype[0], off[u][0], apply_fn<C>(f, v[u]));
    }
  }
}

// out = f(ins...) over out's shape; inputs broadcast to it. Any strides and dtypes.
template <class C, int NIn, class F>
void launch_strided(const Tensor& out, const std::array<const Tensor*, NIn>& ins, const F& f,
                    const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  std::array<Dims, NIn + 1> strides;
  strides[0] = out.strides();
  for (int k = 0; k < NIn; ++k) strides[k + 1] = broadcast_strides(*ins[k], out.sizes());
  StridedArgs<NIn + 1> args;
  args.index = make_indexer<NIn + 1>(out.sizes(), strides, op);
  args.n = n;
  args.data[0] = out.data_ptr();
  args.dtype[0] = out.dtype();
  for (int k = 0; k < NIn; ++k) {
    args.data[k + 1] = ins[k]->data_ptr();
    args.dtype[k + 1] = ins[k]->dtype();
  }
  DeviceScope scope(device);
  const int grid = grid_for(n, kPointwiseThreads, kStridedUnroll, device);
  pointwise_strided_kernel<C, NIn, F><<<grid, kPointwiseThreads, 0, stream_of(device)>>>(args, f);
  cuda_context::check_last_launch(op);
}

template <class T, int V>
struct alignas(sizeof(T) * V) AlignedVec {
  T v[V];
};

// Elements per 16-byte access, sized by the wider of the two element types.
template <class In, class Out>
constexpr int vec_width() {
  constexpr size_t wide = sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out);
  return wide >= 16 ? 1 : static_cast<int>(16 / wide);
}

template <class In, int NIn>
struct InPtrs {
  const In* p[NIn];
};

template <class Out, class In, int NIn, class F>
__global__ void __launch_bounds__(kPointwiseThreads)
    pointwise_contiguous_kernel(Out* out, InPtrs<In, NIn> in, int64_t n, F f) {
  using C = compute_t<In>;
  constexpr int V = vec_width<In, Out>();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / V;
  for (int64_t i = first; i < nvec; i += step) {
    AlignedVec<In, V> a[NIn];
#pragma unroll
    for (int k = 0; k < NIn; ++k) a[k] = reinterpret_cast<const AlignedVec<In, V>*>(in.p[k])[i];
    AlignedVec<Out, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      C v[NIn];
#pragma unroll
      for (int k = 0; k < NIn; ++k) v[k] = widen(a[k].v[j]);
      r.v[j] = convert<Out>(apply_fn<C>(f, v));
    }
    reinterpret_cast<AlignedVec<Out, V>*>(out)[i] = r;
  }
  for (int64_t i = nvec * V + first; i < n; i += step) {
    C v[NIn];
#pragma unroll
    for (int k = 0; k < NIn; ++k) v[k] = widen(in.p[k][i]);
    out[i] = convert<Out>(apply_fn<C>(f, v));
  }
}

// The contiguous path, if it applies: out has element type Out, every input has element
// type In and out's shape, all dense and 16-byte aligned. Returns false otherwise.
template <class Out, class In, int NIn, class F>
bool try_launch_contiguous(const Tensor& out, const std::array<const Tensor*, NIn>& ins, const F& f,
                           const char* op) {
  if (out.dtype() != dtype_of<Out>() || !out.is_contiguous()) return false;
  constexpr int V = vec_width<In, Out>();
  auto aligned = [&](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if (!aligned(out.data_ptr(), sizeof(Out) * V)) return false;
  InPtrs<In, NIn> ptrs;
  for (int k = 0; k < NIn; ++k) {
    const Tensor& t = *ins[k];
    if (t.dtype() != dtype_of<In>() || !t.is_contiguous() || t.sizes() != out.sizes()) return false;
    if (!aligned(t.data_ptr(), sizeof(In) * V)) return false;
    ptrs.p[k] = static_cast<const In*>(t.data_ptr());
  }
  const int64_t n = out.numel();
  if (n == 0) return true;
  const int device = out.device().index;
  DeviceScope scope(device);
  const int grid = grid_for(n, kPointwiseThreads, V, device);
  pointwise_contiguous_kernel<Out, In, NIn, F><<<grid, kPointwiseThreads, 0, stream_of(device)>>>(
      static_cast<Out*>(out.data_ptr()), ptrs, n, f);
  cuda_context::check_last_launch(op);
  return true;
}

template <class Out, class In, int NIn, class F>
__global__ void __launch_bounds__(kPointwiseThreads)
    pointwise_strided_typed_kernel(Out* out, InPtrs<In, NIn> in, StridedIndexer<NIn + 1> index,
                                   int64_t n, F f) {
  using C = compute_t<In>;
  constexpr int U = kStridedUnroll;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * U;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * U + threadIdx.x; base < n;
       base += step) {
    int64_t off[U][NIn + 1];
    C v[U][NIn];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < n) {
        index.offsets(i, off[u]);
#pragma unroll
        for (int k = 0; k < NIn; ++k) v[u][k] = widen(in.p[k][off[u][k + 1]]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + static_cast<int64_t>(u) * blockDim.x < n)
        out[off[u][0]] = convert<Out>(apply_fn<C>(f, v[u]));
    }
  }
}

// The typed strided path, if out has element type Out and every input element type In:
// any strides and broadcasting, no per-element dtype switch. Returns false otherwise.
template <class Out, class In, int NIn, class F>
bool try_launch_strided_typed(const Tensor& out, const std::array<const Tensor*, NIn>& ins,
                              const F& f, const char* op) {
  if (out.dtype() != dtype_of<Out>()) return false;
  InPtrs<In, NIn> ptrs;
  for (int k = 0; k < NIn; ++k) {
    if (ins[k]->dtype() != dtype_of<In>()) return false;
    ptrs.p[k] = static_cast<const In*>(ins[k]->data_ptr());
  }
  const int64_t n = out.numel();
  if (n == 0) return true;
  std::array<Dims, NIn + 1> strides;
  strides[0] = out.strides();
  for (int k = 0; k < NIn; ++k) strides[k + 1] = broadcast_strides(*ins[k], out.sizes());
  const StridedIndexer<NIn + 1> index = make_indexer<NIn + 1>(out.sizes(), strides, op);
  const int device = out.device().index;
  DeviceScope scope(device);
  const int grid = grid_for(n, kPointwiseThreads, kStridedUnroll, device);
  pointwise_strided_typed_kernel<Out, In, NIn, F>
      <<<grid, kPointwiseThreads, 0, stream_of(device)>>>(static_cast<Out*>(out.data_ptr()), ptrs,
                                                          index, n, f);
  cuda_context::check_last_launch(op);
  return true;
}

// out = f(ins...) with the fastest path that applies: dense and aligned (vectorized),
// typed strided (Out/In element types match), or the dynamic-dtype strided engine
// computing in compute_t<In>.
template <class Out, class In, int NIn, class F>
void launch_pointwise(const Tensor& out, const std::array<const Tensor*, NIn>& ins, const F& f,
                      const char* op) {
  if (try_launch_contiguous<Out, In, NIn>(out, ins, f, op)) return;
  if (try_launch_strided_typed<Out, In, NIn>(out, ins, f, op)) return;
  launch_strided<compute_t<In>, NIn>(out, ins, f, op);
}

}  // namespace kiln::cuda_impl
