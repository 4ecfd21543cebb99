// Times the configurations of the 16-bit attention forward (ops/cuda/attention_fwd16.cuh:
// key-tile size BN, Q in registers) against the float32-layout kernel's 16-bit
// instantiation (launch_forward_simple), and prints the largest difference of each
// output from that kernel's (checked against float64 by attention_harness.cu):
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/cuda/attention_tune.cu -o attention_tune
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <random>
#include <vector>

#include "bench/cuda/harness_common.cuh"
#include "ops/cuda/attention_kernels.cuh"

namespace {

using Launch = cudaError_t (*)(const attn::FwdParams&, int, bool, cudaStream_t);

template <class T, int D>
void tune(int B, int H, int L, bool causal, const std::vector<std::pair<const char*, Launch>>& v) {
  const size_t n = static_cast<size_t>(B) * H * L * D;
  std::mt19937 gen(99);
  std::normal_distribution<float> normal;
  std::vector<T> h(3 * n);
  for (auto& x : h) x = T(normal(gen));
  const int R = (L * 4 + D * 2 - 1) / (D * 2);
  const size_t out_n = static_cast<size_t>(B) * H * (L + R) * D;
  T *d, *ref, *out;
  CHECK(cudaMalloc(&d, 3 * n * sizeof(T)));
  CHECK(cudaMalloc(&ref, out_n * sizeof(T)));
  CHECK(cudaMalloc(&out, out_n * sizeof(T)));
  CHECK(cudaMemcpy(d, h.data(), 3 * n * sizeof(T), cudaMemcpyHostToDevice));
  attn::FwdParams p{};
  p.q = d;
  p.k = d + n;
  p.v = d + 2 * n;
  const int64_t sh = static_cast<int64_t>(L) * D;
  p.q_sb = p.k_sb = p.v_sb = sh * H;
  p.q_sh = p.k_sh = p.v_sh = sh;
  p.q_sr = p.k_sr = p.v_sr = D;
  p.out_batch = static_cast<int64_t>(L + R) * D;
  p.heads = H;
  p.L = p.S = L;
  p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(double(D)));
  p.out = ref;
  CHECK((attn::launch_forward_simple<T, D>(p, B, causal, 0)));
  std::vector<T> hr(out_n), ho(out_n);
  CHECK(cudaMemcpy(hr.data(), ref, out_n * sizeof(T), cudaMemcpyDeviceToHost));
  const double flops = 4.0 * B * H * double(L) * L * D * (causal ? 0.5 : 1.0);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (auto& [name, launch] : v) {
    p.out = out;
    CHECK(cudaMemset(out, 0, out_n * sizeof(T)));
    CHECK(launch(p, B, causal, 0));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(ho.data(), out, out_n * sizeof(T), cudaMemcpyDeviceToHost));
    double err = 0, lse = 0;
    for (int bh = 0; bh < B * H; ++bh)
      for (int i = 0; i < (L + R) * D; ++i) {
        const size_t e = static_cast<size_t>(bh) * (L + R) * D + i;
        if (i < L * D) {
          err = std::max(err, double(std::fabs(to_float(hr[e]) - to_float(ho[e]))));
        } else if (i < L * D + L * 2) {
          if (i % 2) continue;  // two 16-bit elements a float
          float x, y;
          std::memcpy(&x, &hr[e], 4);
          std::memcpy(&y, &ho[e], 4);
          lse = std::max(lse, double(std::fabs(x - y)));
        }
      }
    for (int i = 0; i < 3; ++i) CHECK(launch(p, B, causal, 0));
    CHECK(cudaEventRecord(a));
    const int iters = 50;
    for (int i = 0; i < iters; ++i) CHECK(launch(p, B, causal, 0));
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    const double us = 1000.0 * ms / iters;
    std::printf("%2dx%2dx%4dx%3d causal=%d %-14s %8.1f us %6.1f TFLOP/s  diff %.2e lse %.2e\n", B,
                H, L, D, causal, name, us, flops / us * 1e-6, err, lse);
  }
  cudaFree(d);
  cudaFree(ref);
  cudaFree(out);
}

// Odd shapes (L, S past the tiles, S != L), dropout with the mask stored: the output,
// logsumexp and mask words of launch_forward against launch_forward_simple's.
template <class T, int D>
void check(int B, int H, int L, int S, bool causal, float drop) {
  const size_t nq = static_cast<size_t>(B) * H * L * D, nk = static_cast<size_t>(B) * H * S * D;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<T> h(nq + 2 * nk);
  for (auto& x : h) x = T(normal(gen));
  const int R = (L * 4 + D * 2 - 1) / (D * 2), words = (S + 31) / 32;
  const int M = drop > 0.f ? (L * words * 4 + D * 2 - 1) / (D * 2) : 0;
  const size_t out_n = static_cast<size_t>(B) * H * (L + R + M) * D;
  T *d, *o1, *o2;
  CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  CHECK(cudaMalloc(&o1, out_n * sizeof(T)));
  CHECK(cudaMalloc(&o2, out_n * sizeof(T)));
  CHECK(cudaMemset(o1, 0, out_n * sizeof(T)));
  CHECK(cudaMemset(o2, 0, out_n * sizeof(T)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  attn::FwdParams p{};
  p.q = d;
  p.k = d + nq;
  p.v = d + nq + nk;
  p.q_sh = static_cast<int64_t>(L) * D;
  p.q_sb = p.q_sh * H;
  p.k_sh = p.v_sh = static_cast<int64_t>(S) * D;
  p.k_sb = p.v_sb = p.k_sh * H;
  p.q_sr = p.k_sr = p.v_sr = D;
  p.out_batch = static_cast<int64_t>(L + R + M) * D;
  p.mask_offset = static_cast<int64_t>(L + R) * D;
  p.mask_words = M > 0 ? words : 0;
  p.heads = H;
  p.L = L;
  p.S = S;
  p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(double(D)));
  p.dropout.p = drop;
  p.dropout.keep_scale = static_cast<float>(1.0 / (1.0 - drop));
  p.dropout.seed = 5;
  p.dropout.offset = 3;
  p.out = o1;
  CHECK((attn::launch_forward_simple<T, D>(p, B, causal, 0)));
  p.out = o2;
  CHECK((attn::launch_forward<T, D>(p, B, causal, 0)));
  CHECK(cudaDeviceSynchronize());
  std::vector<T> a(out_n), b(out_n);
  CHECK(cudaMemcpy(a.data(), o1, out_n * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), o2, out_n * sizeof(T), cudaMemcpyDeviceToHost));
  double err = 0, mag = 0, lse = 0;
  long bad_words = 0, nan = 0;
  for (int bh = 0; bh < B * H; ++bh) {
    const T* x = a.data() + static_cast<size_t>(bh) * (L + R + M) * D;
    const T* y = b.data() + static_cast<size_t>(bh) * (L + R + M) * D;
    for (int i = 0; i < L * D; ++i) {
      if (std::isnan(to_float(y[i])) != std::isnan(to_float(x[i]))) ++nan;
      err = std::max(err, double(std::fabs(to_float(x[i]) - to_float(y[i]))));
      mag = std::max(mag, double(std::fabs(to_float(x[i]))));
    }
    for (int i = 0; i < L; ++i) {
      float u, w;
      std::memcpy(&u, reinterpret_cast<const char*>(x + L * D) + 4 * i, 4);
      std::memcpy(&w, reinterpret_cast<const char*>(y + L * D) + 4 * i, 4);
      lse = std::max(lse, double(std::fabs(u - w)));
    }
    for (int i = 0; i < L; ++i)  // causal: the words up to the row's diagonal
      for (int w = 0; w < (causal ? std::min(i / 32 + 1, words) : words); ++w) {
        uint32_t u, z;
        std::memcpy(&u, reinterpret_cast<const char*>(x + (L + R) * D) + 4 * (i * words + w), 4);
        std::memcpy(&z, reinterpret_cast<const char*>(y + (L + R) * D) + 4 * (i * words + w), 4);
        if (M > 0 && u != z) ++bad_words;
      }
  }
  std::printf(
      "check D=%3d %dx%dx L=%4d S=%4d causal=%d p=%.1f  rel diff %.2e  lse %.2e  "
      "mask words differing %ld  nan mismatches %ld\n",
      D, B, H, L, S, causal, drop, err / mag, lse, bad_words, nan);
  cudaFree(d);
  cudaFree(o1);
  cudaFree(o2);
}

}  // namespace

int main() {
  using T = __nv_bfloat16;
  using namespace attn;
  for (int causal = 0; causal < 2; ++causal)
    for (float drop : {0.f, 0.2f}) {
      check<T, 64>(2, 3, 200, 333, causal, drop);
      check<T, 64>(2, 3, 333, 202, causal, drop);
      check<__half, 64>(1, 2, 130, 130, causal, drop);
      check<T, 128>(2, 3, 200, 333, causal, drop);
      check<T, 128>(2, 3, 333, 202, causal, drop);
      check<T, 128>(1, 2, 64, 1, causal, drop);
    }
  for (int causal = 0; causal < 2; ++causal) {  // lazy: not causal only
    tune<T, 64>(16, 8, 1024, causal,
                {{"simple", launch_forward_simple<T, 64>},
                 {"bn64 qreg", fwd16::launch<T, 64, 64, true, false>},
                 {"bn64 qreg lazy", fwd16::launch<T, 64, 64, true, true>},
                 {"bn64", fwd16::launch<T, 64, 64, false, false>},
                 {"bn128", fwd16::launch<T, 64, 128, false, false>},
                 {"bn128 lazy", fwd16::launch<T, 64, 128, false, true>}});
    tune<T, 128>(4, 16, 4096, causal,
                 {{"simple", launch_forward_simple<T, 128>},
                  {"bn64", fwd16::launch<T, 128, 64, false, false>},
                  {"bn64 lazy", fwd16::launch<T, 128, 64, false, true>},
                  {"bn32", fwd16::launch<T, 128, 32, false, false>}});
  }
  return 0;
}
