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

#include "bench/cuda/harness_common.cuh"
#include "ops/cuda/attention_backward_tf32.cuh"

namespace {

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

// Backward, float32, head size D: the tensor-core kernel (D = 64) and the plain float32
// one against a float64 reference built from the forward's definition (dropout mask from
// the same Philox words), on two (batch, head) pairs; then the time of each.
template <int D>
void run_backward_case(int B, int H, int L, bool causal, float drop_p) {
  const int S = L;
  const size_t n = static_cast<size_t>(B) * H * L * D;
  std::mt19937 gen(4321);
  std::normal_distribution<float> normal;
  std::vector<float> hq(n), hk(n), hv(n), hg(n);
  for (size_t i = 0; i < n; ++i) {
    hq[i] = normal(gen);
    hk[i] = normal(gen);
    hv[i] = normal(gen);
    hg[i] = normal(gen);
  }
  const int R = (L * 4 + D * 4 - 1) / (D * 4);
  const int words = (S + 31) / 32;  // the dropout mask's rows (read by the backward)
  const int M = drop_p > 0.f ? (L * words * 4 + D * 4 - 1) / (D * 4) : 0;
  const size_t out_n = static_cast<size_t>(B) * H * (L + R + M) * D;
  const size_t grads_n = static_cast<size_t>(B) * H * (L + 2 * S) * D;
  float *dq, *dk, *dv, *dg, *dout, *dgrads;
  CHECK(cudaMalloc(&dq, n * 4));
  CHECK(cudaMalloc(&dk, n * 4));
  CHECK(cudaMalloc(&dv, n * 4));
  CHECK(cudaMalloc(&dg, n * 4));
  CHECK(cudaMalloc(&dout, out_n * 4));
  CHECK(cudaMalloc(&dgrads, grads_n * 4));
  CHECK(cudaMemcpy(dq, hq.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, hk.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dv, hv.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dg, hg.data(), n * 4, cudaMemcpyHostToDevice));
  const int64_t sh = static_cast<int64_t>(L) * D, sb = sh * H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  attn::Dropout drop;
  drop.p = drop_p;
  drop.keep_scale = static_cast<float>(1.0 / (1.0 - drop_p));
  drop.seed = 77;
  drop.offset = 12;
  attn::FwdParams f{};
  f.q = dq;
  f.k = dk;
  f.v = dv;
  f.out = dout;
  f.q_sb = f.k_sb = f.v_sb = sb;
  f.q_sh = f.k_sh = f.v_sh = sh;
  f.q_sr = f.k_sr = f.v_sr = D;
  f.out_batch = static_cast<int64_t>(L + R + M) * D;
  f.mask_offset = static_cast<int64_t>(L + R) * D;
  f.mask_words = M > 0 ? words : 0;
  f.heads = H;
  f.L = L;
  f.S = S;
  f.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  f.dropout = drop;
  CHECK((attn::launch_forward<float, D>(f, B, causal, 0)));
  attn::BwdParams p{};
  p.q = dq;
  p.k = dk;
  p.v = dv;
  p.grad = dg;
  p.q_sb = p.k_sb = p.v_sb = p.g_sb = sb;
  p.q_sh = p.k_sh = p.v_sh = p.g_sh = sh;
  p.q_sr = p.k_sr = p.v_sr = p.g_sr = D;
  p.grad_vec = true;
  p.packed = dout;
  p.packed_batch = f.out_batch;
  p.mask_offset = f.mask_offset;
  p.mask_words = f.mask_words;
  p.dq = dgrads;  // rows [0, L) dq, then dk, then dv, per (batch, head)
  p.dk = dgrads + static_cast<int64_t>(L) * D;
  p.dv = p.dk + static_cast<int64_t>(S) * D;
  p.o_sh = static_cast<int64_t>(L + 2 * S) * D;
  p.o_sb = p.o_sh * H;
  p.o_sr = D;
  p.heads = H;
  p.L = L;
  p.S = S;
  p.scale = static_cast<float>(scale);
  p.dropout = drop;
  auto launch = [&](bool tc) {
    if constexpr (D == 64) {
      if (tc) return attn::tf32_bwd::launch(p, B, causal, 0);
    }
    return attn::launch_backward<D>(p, B, causal, 0);
  };
  // float64 reference for two (batch, head) pairs.
  const int pairs[2] = {0, B * H - 1};
  std::vector<double> ref[2];
  for (int pi = 0; pi < 2; ++pi) {
    const int bh = pairs[pi];
    const float* q = hq.data() + static_cast<size_t>(bh) * L * D;
    const float* k = hk.data() + static_cast<size_t>(bh) * L * D;
    const float* v = hv.data() + static_cast<size_t>(bh) * L * D;
    const float* go = hg.data() + static_cast<size_t>(bh) * L * D;
    std::vector<double>& r = ref[pi];
    r.assign(static_cast<size_t>(L + 2 * S) * D, 0.0);
    std::vector<double> pr(S), z(S), dpv(S);
    for (int i = 0; i < L; ++i) {
      const int end = causal ? std::min(i + 1, S) : S;
      double mx = -INFINITY;
      for (int j = 0; j < end; ++j) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += double(q[i * D + e]) * k[j * D + e];
        pr[j] = d * scale;
        mx = std::max(mx, pr[j]);
      }
      double sum = 0;
      for (int j = 0; j < end; ++j) sum += (pr[j] = std::exp(pr[j] - mx));
      double di = 0;  // rowsum(dP Z * P) = rowsum(dO * O)
      for (int j = 0; j < end; ++j) {
        pr[j] /= sum;
        const uint64_t index = (static_cast<uint64_t>(bh) * L + i) * S + j;
        const uint32_t w = kiln::philox::word_of(kiln::philox::draw(77, 12, index >> 2),
                                                 static_cast<uint32_t>(index & 3));
        const bool keep =
            drop_p == 0.f || static_cast<float>(w >> 8) * (1.0f / 16777216.0f) >= drop_p;
        z[j] = keep ? drop.keep_scale : 0.0;
        double d = 0;
        for (int e = 0; e < D; ++e) d += double(go[i * D + e]) * v[j * D + e];
        dpv[j] = d;
        di += pr[j] * z[j] * d;
      }
      for (int j = 0; j < end; ++j) {
        const double ds = pr[j] * (dpv[j] * z[j] - di) * scale;
        for (int e = 0; e < D; ++e) {
          r[static_cast<size_t>(i) * D + e] += ds * k[j * D + e];                     // dq
          r[static_cast<size_t>(L + j) * D + e] += ds * q[i * D + e];                 // dk
          r[static_cast<size_t>(L + S + j) * D + e] += pr[j] * z[j] * go[i * D + e];  // dv
        }
      }
    }
  }
  std::vector<float> got(grads_n);
  for (int tc = D == 64 ? 1 : 0; tc >= 0; --tc) {
    CHECK(launch(tc));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(got.data(), dgrads, grads_n * 4, cudaMemcpyDeviceToHost));
    double err[3] = {0, 0, 0}, mag[3] = {0, 0, 0};
    for (int pi = 0; pi < 2; ++pi) {
      const float* gg = got.data() + static_cast<size_t>(pairs[pi]) * (L + 2 * S) * D;
      for (size_t e = 0; e < ref[pi].size(); ++e) {
        const int part = e < static_cast<size_t>(L) * D       ? 0
                         : e < static_cast<size_t>(L + S) * D ? 1
                                                              : 2;
        err[part] = std::max(err[part], std::fabs(ref[pi][e] - gg[e]));
        mag[part] = std::max(mag[part], std::fabs(ref[pi][e]));
      }
    }
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) CHECK(launch(tc));
    CHECK(cudaEventRecord(a));
    const int iters = 20;
    for (int i = 0; i < iters; ++i) CHECK(launch(tc));
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    std::printf(
        "bwd %-5s %2dx%2dx%4dx%3d causal=%d p=%.1f  %9.1f us  rel_err dq %.2e dk %.2e dv %.2e\n",
        tc ? "tf32" : "simt", B, H, L, D, causal, drop_p, 1000.0 * ms / iters, err[0] / mag[0],
        err[1] / mag[1], err[2] / mag[2]);
  }
  for (float* x : {dq, dk, dv, dg, dout, dgrads}) cudaFree(x);
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
  for (int causal = 0; causal < 2; ++causal) {
    run_backward_case<64>(2, 3, 200, causal, 0.f);  // rows past L and S, odd S
    run_backward_case<64>(2, 3, 256, causal, 0.2f);
    run_backward_case<64>(2, 3, 202, causal, 0.2f);   // S % 4 != 0: per-pair draws
    run_backward_case<64>(16, 6, 256, causal, 0.2f);  // the GPT's attention
    run_backward_case<64>(16, 8, 1024, causal, 0.f);
    run_backward_case<128>(2, 3, 256, causal, 0.2f);
  }
  return 0;
}
