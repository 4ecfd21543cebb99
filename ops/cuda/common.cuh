// Shared plumbing of the CUDA kernels (ops/cuda/*.cu): error checks, the device guard,
// the device's stream and launch geometry, element conversions between kiln's dtypes,
// loads/stores whose dtype is known only at run time, and warp/block reductions.
//
// Contracts:
//  - Every launch goes on cuda_context::stream(device) and is followed by
//    cuda_context::check_last_launch(op).
//  - Host-side helpers run under a DeviceScope so that launches and cuBLAS calls target
//    the tensor's device, whatever device the calling thread had current.
//  - Kernels never validate user input (the shape rules did); host helpers that find an
//    impossible case throw kiln::Error naming the op.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "ops/kernels.h"
#include "runtime/cuda_context.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace kiln::cuda_impl {

// ---- host helpers (ops/cuda/common.cu)

// Throws BackendError "[op] what failed: cudaErrorX (...)" unless e is cudaSuccess.
void check(cudaError_t e, const char* op, const char* what);

// Makes a device current for the scope (restores the previous one).
using DeviceScope = cuda_context::DeviceScope;

inline cudaStream_t stream_of(int device) {
  return static_cast<cudaStream_t>(cuda_context::stream(device));
}
int sm_count(int device);  // cached per device

// Blocks for a grid-stride loop over n items with `threads` threads per block, each
// handling `per_thread` items per pass: enough to fill the device, no more than needed.
int grid_for(int64_t n, int threads, int per_thread, int device);

// A contiguous copy of t converted to dtype, on t's device (t itself when it already
// is one). Runs the Cast kernel directly: nothing is dispatched or recorded.
Tensor packed(const Tensor& t, DType dtype);
inline Tensor packed(const Tensor& t) { return packed(t, t.dtype()); }

// Element-wise dst = convert(src) for same-shape tensors with any strides and dtypes.
void copy_convert(const Tensor& src, const Tensor& dst, const char* op);

// The same-dtype copy as tiled transposes (ops/cuda/transpose.cu) when dst is dense along
// one dim and src along another; returns false (nothing done) when that does not apply.
bool try_transpose_copy(const Tensor& src, const Tensor& dst, const char* op);

// Runs body(o) with o == out when out is contiguous with the given dtype, else with a
// contiguous scratch tensor of that dtype that is then copied (converted) into out. For
// kernels that write packed outputs of one dtype.
template <class F>
void with_packed_out(const Tensor& out, DType dtype, const char* op, F&& body) {
  if (out.is_contiguous() && out.dtype() == dtype) {
    body(out);
    return;
  }
  Tensor tmp = Tensor::make(out.sizes(), dtype, out.device());
  body(tmp);
  copy_convert(tmp, out, op);
}
template <class F>
void with_packed_out(const Tensor& out, const char* op, F&& body) {
  with_packed_out(out, out.dtype(), op, std::forward<F>(body));
}

// Scratch device memory from the caching allocator, released (back to the cache) when
// it goes out of scope. Safe to release before queued kernels finish: every user of a
// device's memory runs on that device's one stream.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t nbytes, int device)
      : ptr_(cuda_context::allocate(nbytes, device)), nbytes_(nbytes), device_(device) {}
  ~DeviceBuffer() { cuda_context::release(ptr_, nbytes_, device_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_;
  size_t nbytes_;
  int device_;
};

// Calls f(T{}) for the storage type T of a floating dtype (Half, BFloat16, float,
// double); throws DTypeError naming op for other dtypes.
template <class F>
void visit_floating(DType d, const char* op, F&& f) {
  visit_dtype(d, [&](auto tag) {
    if constexpr (std::is_floating_point_v<compute_t<decltype(tag)>>)
      f(tag);
    else
      throw DTypeError(
          detail::cat("[", op, "] the CUDA kernel does not support dtype ", dtype_name(d)));
  });
}

// ---- element conversions (host and device)

template <class T>
struct IsHalfLike : std::false_type {};
template <>
struct IsHalfLike<Half> : std::true_type {};
template <>
struct IsHalfLike<BFloat16> : std::true_type {};

// The arithmetic value of a storage element (16-bit floats widen to float).
template <class T>
KILN_HD compute_t<T> widen(T v) {
  if constexpr (IsHalfLike<T>::value)
    return static_cast<float>(v);
  else
    return v;
}

// Converts between any two element types the way a C++ cast of the value does
// (bool: nonzero; 16-bit floats through float; NaN to bool is true like PyTorch).
template <class To, class From>
KILN_HD To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return widen(v) != compute_t<From>(0);
  } else if constexpr (IsHalfLike<To>::value) {
    return To(static_cast<float>(widen(v)));
  } else {
    return static_cast<To>(widen(v));
  }
}

template <class T>
KILN_HD bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// ---- loads and stores with a run-time dtype (a uniform switch per element; device code,
// so these switch by hand: visit_dtype is host-only)

template <class C>
__device__ __forceinline__ C load_as(const void* base, DType d, int64_t i) {
  switch (d) {
    case DType::Bool:
      return convert<C>(static_cast<const bool*>(base)[i]);
    case DType::Int32:
      return convert<C>(static_cast<const int32_t*>(base)[i]);
    case DType::Int64:
      return convert<C>(static_cast<const int64_t*>(base)[i]);
    case DType::Float16:
      return convert<C>(static_cast<const Half*>(base)[i]);
    case DType::BFloat16:
      return convert<C>(static_cast<const BFloat16*>(base)[i]);
    case DType::Float32:
      return convert<C>(static_cast<const float*>(base)[i]);
    case DType::Float64:
      return convert<C>(static_cast<const double*>(base)[i]);
  }
  return C{};
}

template <class V>
__device__ __forceinline__ void store_as(void* base, DType d, int64_t i, V v) {
  switch (d) {
    case DType::Bool:
      static_cast<bool*>(base)[i] = convert<bool>(v);
      return;
    case DType::Int32:
      static_cast<int32_t*>(base)[i] = convert<int32_t>(v);
      return;
    case DType::Int64:
      static_cast<int64_t*>(base)[i] = convert<int64_t>(v);
      return;
    case DType::Float16:
      static_cast<Half*>(base)[i] = convert<Half>(v);
      return;
    case DType::BFloat16:
      static_cast<BFloat16*>(base)[i] = convert<BFloat16>(v);
      return;
    case DType::Float32:
      static_cast<float*>(base)[i] = convert<float>(v);
      return;
    case DType::Float64:
      static_cast<double*>(base)[i] = convert<double>(v);
      return;
  }
}

// ---- warp and block reductions over a combine functor

constexpr int kWarp = 32;

// Warp shuffles of any trivially copyable value: arithmetic types directly, small ones
// widened to int, structs (reduction accumulators) as 4-byte words.
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int mask) {
  if constexpr (std::is_arithmetic_v<T> && sizeof(T) >= 4) {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  } else if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), mask));
  } else {
    static_assert(sizeof(T) % 4 == 0, "shuffle of an odd-sized struct");
    constexpr int kWords = static_cast<int>(sizeof(T) / 4);
    int words[kWords];
    memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < kWords; ++i) words[i] = __shfl_xor_sync(0xffffffffu, words[i], mask);
    T out;
    memcpy(&out, words, sizeof(T));
    return out;
  }
}

// Combines v across groups of `width` consecutive lanes (width a power of two <= 32);
// every lane of the group gets the result. All 32 lanes must call it.
template <int Width, class T, class F>
__device__ __forceinline__ T group_allreduce(T v, F f) {
#pragma unroll
  for (int m = Width / 2; m > 0; m /= 2) v = f(v, shfl_xor(v, m));
  return v;
}

// Combines v over the whole block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. scratch holds 32 values. Ends with a barrier, so scratch can
// be reused right after.
template <class T, class F>
__device__ T block_allreduce(T v, F f, T* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = group_allreduce<kWarp>(v, f);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < warps; ++w) r = f(r, scratch[w]);
  __syncthreads();
  return r;
}

}  // namespace kiln::cuda_impl
