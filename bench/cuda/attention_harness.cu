// Standalone check and timing of the CUDA attention forward (ops/cuda/attention_kernels.cuh),
// built with nvcc alone (no kiln library) so that it runs on a GPU host as one binary:
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/cuda/attention_harness.cu -o attention_harness
//   ./attention_harness            # prints one line per case
//
// Each case: random q, k, v (contiguous [B, H, L, D]); the kernel's output and logsumexp
// against a float64 reference on the host (two (batch, head) pairs, every row), as the
// largest |error| over the largest |reference| value; then the mean time of 20 launches
// after 3 warmup launches (CUDA events).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ops/cuda/attention_kernels.cuh"

namespace {

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

float to_float(float x) { return x; }
float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
float to_float(__half x) { return __half2float(x); }
template <class T>
T from_float(float x) {
  if constexpr (sizeof(T) == 4)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);
  else
    return __float2half(x);
}

template <class T, int D>
void run_case(const char* name, int B, int H, int L, bool causal) {
  const int S = L;
  const size_t n = static_cast<size_t>(B) * H * L * D;
  std::mt19937 gen(1234);
  std::normal_distribution<float> normal;
  std::vector<T> hq(n), hk(n), hv(n);
  for (size_t i = 0; i < n; ++i) {
    hq[i] = from_float<T>(normal(gen));
    hk[i] = from_float<T>(normal(gen));
    hv[i] = from_float<T>(normal(gen));
  }
  const int R =
      static_cast<int>((static_cast<int64_t>(L) * 4 + D * sizeof(T) - 1) / (D * sizeof(T)));
  const size_t out_n = static_cast<size_t>(B) * H * (L + R) * D;
  T *dq, *dk, *dv, *dout;
  CHECK(cudaMalloc(&dq, n * sizeof(T)));
  CHECK(cudaMalloc(&dk, n * sizeof(T)));
  CHECK(cudaMalloc(&dv, n * sizeof(T)));
  CHECK(cudaMalloc(&dout, out_n * sizeof(T)));
  CHECK(cudaMemcpy(dq, hq.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, hk.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dv, hv.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  attn::FwdParams p{};
  p.q = dq;
  p.k = dk;
  p.v = dv;
  p.out = dout;
  const int64_t sh = static_cast<int64_t>(L) * D, sb = sh * H;
  p.q_sb = p.k_sb = p.v_sb = sb;
  p.q_sh = p.k_sh = p.v_sh = sh;
  p.q_sr = p.k_sr = p.v_sr = D;
  p.out_batch = static_cast<int64_t>(L + R) * D;
  p.heads = H;
  p.L = L;
  p.S = S;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  CHECK((attn::launch_forward<T, D>(p, B, causal, 0)));
  CHECK(cudaDeviceSynchronize());
  std::vector<T> hout(out_n);
  CHECK(cudaMemcpy(hout.data(), dout, out_n * sizeof(T), cudaMemcpyDeviceToHost));
  double max_err = 0, max_ref = 0, lse_err = 0;
  const int pairs[2] = {0, B * H - 1};
  for (int bh : pairs) {
    const T* q = hq.data() + static_cast<size_t>(bh) * L * D;
    const T* k = hk.data() + static_cast<size_t>(bh) * L * D;
    const T* v = hv.data() + static_cast<size_t>(bh) * L * D;
    const T* o = hout.data() + static_cast<size_t>(bh) * (L + R) * D;
    float lse_got[1];
    std::vector<double> s(S), acc(D);
    for (int i = 0; i < L; ++i) {
      double mx = -INFINITY;
      const int end = causal ? i + 1 : S;
      for (int j = 0; j < end; ++j) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += double(to_float(q[i * D + e])) * to_float(k[j * D + e]);
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < end; ++j) {
        const double w = std::exp(s[j] - mx);
        sum += w;
        for (int e = 0; e < D; ++e) acc[e] += w * to_float(v[j * D + e]);
      }
      for (int e = 0; e < D; ++e) {
        const double ref = acc[e] / sum;
        max_ref = std::max(max_ref, std::fabs(ref));
        max_err = std::max(max_err, std::fabs(ref - to_float(o[i * D + e])));
      }
      std::memcpy(lse_got, reinterpret_cast<const char*>(o + static_cast<size_t>(L) * D) + i * 4,
                  4);
      lse_err = std::max(lse_err, std::fabs(lse_got[0] - (mx + std::log(sum))));
    }
  }
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) CHECK((attn::launch_forward<T, D>(p, B, causal, 0)));
  CHECK(cudaEventRecord(a));
  const int iters = 20;
  for (int i = 0; i < iters; ++i) CHECK((attn::launch_forward<T, D>(p, B, causal, 0)));
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  const double us = 1000.0 * ms / iters;
  const double flops = 4.0 * B * H * double(L) * S * D * (causal ? 0.5 : 1.0);
  std::printf(
      "%-6s %2dx%2dx%4dx%3d causal=%d  fwd %9.1f us  %6.1f TFLOP/s  rel_err %.2e  lse_err %.2e\n",
      name, B, H, L, D, causal, us, flops / us * 1e-6, max_err / max_ref, lse_err);
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(dv);
  cudaFree(dout);
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  for (int causal = 0; causal < 2; ++causal) {
    run_case<float, 64>("fp32", 16, 8, 1024, causal);
    run_case<__nv_bfloat16, 64>("bf16", 16, 8, 1024, causal);
    run_case<__half, 64>("fp16", 16, 8, 1024, causal);
    run_case<__nv_bfloat16, 128>("bf16", 4, 16, 4096, causal);
  }
  return 0;
}
