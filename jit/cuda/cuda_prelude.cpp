// The argument layout and the prelude every NVRTC program of fused kernels starts with
// (see cuda_codegen.h): the word array type, 16-bit float conversions, and the
// deterministic warp and block reductions the row kernels use.
#include <string>

#include "jit/cuda/cuda_codegen.h"

namespace kiln::jit::cuda_backend {

ArgsLayout args_layout(const Kernel& kernel) {
  ArgsLayout l;
  l.operands = static_cast<int>(kernel.operands.size());
  l.rank = kernel.rank;
  l.scalars = static_cast<int>(kernel.scalar_is_float.size());
  return l;
}

const std::string& cuda_prelude() {
  static const std::string text = R"(// kiln fused kernels (generated)
#include "ops/pointwise_math.h"
#include "ops/philox.h"
template <int N> struct KilnArgs { long long v[N]; };
template <class S> struct alignas(4 * sizeof(S)) KilnVec { S x[4]; };
__device__ __forceinline__ unsigned short kiln_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float kiln_h2f(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ float kiln_bf2f(unsigned short b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}
__device__ __forceinline__ unsigned short kiln_f2bf(float f) {  // nearest even; NaN stays NaN
  if (f != f) return 0x7fc0;
  unsigned u = __float_as_uint(f);
  return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
struct KilnSum { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct KilnMax { template <class T> __device__ T operator()(T a, T b) const { return kiln::pm::max(a, b); } };
struct KilnMin { template <class T> __device__ T operator()(T a, T b) const { return kiln::pm::min(a, b); } };
// Every lane gets lane 0's result of a fixed tree: deterministic run to run.
template <class T, class F>
__device__ __forceinline__ T kiln_warp_reduce(T v, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return __shfl_sync(0xffffffffu, v, 0);
}
// Every thread gets lane 0's result of a fixed tree: deterministic run to run.
template <class T, class F>
__device__ __forceinline__ T kiln_block_reduce(T v, F f, unsigned long long* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  T* s = reinterpret_cast<T*>(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) s[warp] = v;
  __syncthreads();
  T r = s[0];
  for (int w = 1; w < warps; ++w) r = f(r, s[w]);
  return r;
}
)";
  return text;
}

}  // namespace kiln::jit::cuda_backend
