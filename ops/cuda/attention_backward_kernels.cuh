// The CUDA fused attention backward for float32 (FlashAttention-2's backward), free of
// kiln types like the forward (ops/cuda/attention_kernels.cuh, whose Dropout it shares).
//
// One block of 256 threads per (batch, head, 64 keys): K_j and V_j stay in shared memory
// while the block walks the 64-query tiles that see them (from the diagonal on when
// causal). Per tile, from the saved logsumexp and D_i = rowsum(dO_i * O_i):
//   P = exp(scale * Q_i K_j^T - lse_i)          (masked past S, above the diagonal)
//   Z = keep / (1 - dropout_p) (1 without dropout), the forward's mask for the tile
//   dV_j += (P Z)^T dO_i,   dP = dO_i V_j^T,   dS = P (dP Z - D_i) scale
//   dK_j += dS^T Q_i,       dQ_i += dS K_j     (atomic adds: blocks of other keys add too)
// dK_j and dV_j live in registers and are written once at the end; dQ is accumulated in
// the output, which the caller zeroes first. Products are plain float32 FMAs (16 or 32
// outputs per thread from shared memory): float32 accuracy, no tensor cores.
//
// Output: dq, dk, dv at the strides of BwdParams (ops/attention_layout.h: grads).
#pragma once

#include <cstdint>

#include "ops/cuda/attention_kernels.cuh"

namespace attn {

constexpr int kBwdThreads = 256;

struct BwdParams {
  const float *q, *k, *v, *grad;  // grad: dO, [.., L, D]
  int64_t q_sb, q_sh, q_sr, k_sb, k_sh, k_sr, v_sb, v_sh, v_sr, g_sb, g_sh, g_sr;
  bool grad_vec;         // grad's rows start 16-byte aligned (its pointer and strides allow it)
  const float* packed;   // the forward's output: rows [0, L) O, then the logsumexp
  int64_t packed_batch;  // (L + R) * D
  // Outputs (ops/attention_layout.h): row `row` of (batch b, head h) of dq at
  // dq + b * o_sb + h * o_sh + row * o_sr, the same for dk and dv.
  float *dq, *dk, *dv;
  int64_t o_sb, o_sh, o_sr;
  int heads, L, S;
  float scale;
  Dropout dropout;
  // With mask_words > 0 the forward's dropout bits are at elements [mask_offset, ...) of
  // each packed entry (ops/attention_layout.h), mask_words a query: read, not drawn.
  int64_t mask_offset;
  int mask_words;
};

// Rows [r0, r0 + 64) of a [rows, D] float matrix (row stride sr) into smem rows of pitch
// D + 1, zeros past `limit`.
template <int D>
__device__ __forceinline__ void load_rows_f32(float* smem, const float* src, int64_t sr, int r0,
                                              int limit) {
  for (int e = threadIdx.x; e < 64 * D; e += kBwdThreads) {
    const int r = e / D, c = e % D;
    smem[r * (D + 1) + c] = r0 + r < limit ? src[(r0 + r) * sr + c] : 0.f;
  }
}

template <int D, bool Causal, bool Drop>
__global__ void __launch_bounds__(kBwdThreads) backward_kernel(BwdParams p) {
  constexpr int kP = D + 1;   // pitch of Q, K, V, dO tiles
  constexpr int kSP = 65;     // pitch of the P and dS tiles
  constexpr int kW = D / 16;  // output columns per thread in the [64, D] products
  extern __shared__ float smem[];
  float* sk = smem;
  float* sv = sk + 64 * kP;
  float* sq = sv + 64 * kP;
  float* sdo = sq + 64 * kP;
  float* sp = sdo + 64 * kP;   // P Z, [query][key]
  float* sds = sp + 64 * kSP;  // dS, [query][key]
  float* slse = sds + 64 * kSP;
  float* sdi = slse + 64;

  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  const int j0 = blockIdx.x * 64, head = blockIdx.y, batch = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(batch) * p.heads + head;
  const float* q = p.q + batch * p.q_sb + head * p.q_sh;
  const float* k = p.k + batch * p.k_sb + head * p.k_sh;
  const float* v = p.v + batch * p.v_sb + head * p.v_sh;
  const float* g = p.grad + batch * p.g_sb + head * p.g_sh;
  const float* o = p.packed + bh * p.packed_batch;
  const float* lse = o + static_cast<int64_t>(p.L) * D;
  float* dq = p.dq + batch * p.o_sb + head * p.o_sh;
  uint64_t seed = 0, offset = 0;
  if constexpr (Drop) load_state(p.dropout, seed, offset);

  load_rows_f32<D>(sk, k, p.k_sr, j0, p.S);
  load_rows_f32<D>(sv, v, p.v_sr, j0, p.S);
  float dk[4][kW], dv[4][kW];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < kW; ++b) dk[a][b] = dv[a][b] = 0.f;

  for (int i0 = Causal ? j0 : 0; i0 < p.L; i0 += 64) {
    __syncthreads();  // the previous tile's readers are done
    load_rows_f32<D>(sq, q, p.q_sr, i0, p.L);
    load_rows_f32<D>(sdo, g, p.g_sr, i0, p.L);
    {  // D_i = rowsum(dO * O): 4 threads per row
      const int r = tid / 4, part = tid % 4;
      float acc = 0.f;
      if (i0 + r < p.L) {
        const float* orow = o + static_cast<int64_t>(i0 + r) * D;
        const float* grow = g + static_cast<int64_t>(i0 + r) * p.g_sr;
        for (int c = part; c < D; c += 4) acc += orow[c] * grow[c];
      }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      acc += __shfl_xor_sync(0xffffffffu, acc, 2);
      if (part == 0) {
        sdi[r] = acc;
        slse[r] = i0 + r < p.L ? lse[i0 + r] : INFINITY;
      }
    }
    __syncthreads();
    // S, then P and the dropout scale per element; this thread: rows tr + 16a, keys 4tc + b.
    float pr[4][4], z[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) pr[a][b] = 0.f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float qa[4], kb[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) qa[a] = sq[(tr + 16 * a) * kP + d];
#pragma unroll
      for (int b = 0; b < 4; ++b) kb[b] = sk[(4 * tc + b) * kP + d];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) pr[a][b] = fmaf(qa[a], kb[b], pr[a][b]);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int r = tr + 16 * a, row = i0 + r;
      bool keep[4] = {true, true, true, true};
      if constexpr (Drop) {  // keys 4 tc .. 4 tc + 3: one draw when they share it
        const uint64_t index = (static_cast<uint64_t>(bh) * p.L + row) * p.S + j0 + 4 * tc;
        if ((index & 3) == 0) {
          const kiln::philox::Uint4 w = kiln::philox::draw(seed, offset, index >> 2);
          keep[0] = kept_word(w.x, p.dropout.p);
          keep[1] = kept_word(w.y, p.dropout.p);
          keep[2] = kept_word(w.z, p.dropout.p);
          keep[3] = kept_word(w.w, p.dropout.p);
        } else {
#pragma unroll
          for (int b = 0; b < 4; ++b) keep[b] = kept(seed, offset, index + b, p.dropout.p);
        }
      }
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int c = 4 * tc + b, col = j0 + c;
        const bool live = row < p.L && col < p.S && !(Causal && col > row);
        pr[a][b] = live ? __expf(pr[a][b] * p.scale - slse[r]) : 0.f;
        z[a][b] = Drop ? (live && keep[b] ? p.dropout.keep_scale : 0.f) : 1.f;
        sp[r * kSP + c] = pr[a][b] * z[a][b];
      }
    }
    // dP = dO V^T, then dS = P (dP Z - D_i) scale.
    float dp[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) dp[a][b] = 0.f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      float ga[4], vb[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) ga[a] = sdo[(tr + 16 * a) * kP + d];
#pragma unroll
      for (int b = 0; b < 4; ++b) vb[b] = sv[(4 * tc + b) * kP + d];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) dp[a][b] = fmaf(ga[a], vb[b], dp[a][b]);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int r = tr + 16 * a;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        sds[r * kSP + 4 * tc + b] = pr[a][b] * (dp[a][b] * z[a][b] - sdi[r]) * p.scale;
    }
    __syncthreads();
    // dV_j += (P Z)^T dO_i and dK_j += dS^T Q_i; this thread: keys tr + 16a, dims tc + 16b.
#pragma unroll 4
    for (int r = 0; r < 64; ++r) {
      float pa[4], sa[4], gb[kW], qb[kW];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        pa[a] = sp[r * kSP + tr + 16 * a];
        sa[a] = sds[r * kSP + tr + 16 * a];
      }
#pragma unroll
      for (int b = 0; b < kW; ++b) {
        gb[b] = sdo[r * kP + tc + 16 * b];
        qb[b] = sq[r * kP + tc + 16 * b];
      }
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < kW; ++b) {
          dv[a][b] = fmaf(pa[a], gb[b], dv[a][b]);
          dk[a][b] = fmaf(sa[a], qb[b], dk[a][b]);
        }
    }
    // dQ_i += dS K_j; this thread: queries tr + 16a, dims tc + 16b.
    float dqa[4][kW];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < kW; ++b) dqa[a][b] = 0.f;
#pragma unroll 4
    for (int c = 0; c < 64; ++c) {
      float sa[4], kb[kW];
#pragma unroll
      for (int a = 0; a < 4; ++a) sa[a] = sds[(tr + 16 * a) * kSP + c];
#pragma unroll
      for (int b = 0; b < kW; ++b) kb[b] = sk[c * kP + tc + 16 * b];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < kW; ++b) dqa[a][b] = fmaf(sa[a], kb[b], dqa[a][b]);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int row = i0 + tr + 16 * a;
      if (row >= p.L) continue;
#pragma unroll
      for (int b = 0; b < kW; ++b) atomicAdd(dq + row * p.o_sr + tc + 16 * b, dqa[a][b]);
    }
  }
  float* dkp = p.dk + batch * p.o_sb + head * p.o_sh;
  float* dvp = p.dv + batch * p.o_sb + head * p.o_sh;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int key = j0 + tr + 16 * a;
    if (key >= p.S) continue;
#pragma unroll
    for (int b = 0; b < kW; ++b) {
      dkp[key * p.o_sr + tc + 16 * b] = dk[a][b];
      dvp[key * p.o_sr + tc + 16 * b] = dv[a][b];
    }
  }
}

template <int D>
constexpr int backward_smem() {
  return (4 * 64 * (D + 1) + 2 * 64 * 65 + 2 * 64) * static_cast<int>(sizeof(float));
}

// Zeroes dq (the kernels add into it; head_size columns a row) on stream: one 2-D memset
// over (batch, row) when a row's heads are side by side (o_sh == head_size, rows apart),
// else over (batch, head) (rows packed: o_sr == head_size).
inline cudaError_t zero_dq(const BwdParams& p, int head_size, int batch, cudaStream_t stream) {
  const size_t row_bytes = static_cast<size_t>(head_size) * sizeof(float);
  if (p.o_sr != head_size)
    return cudaMemset2DAsync(p.dq, p.o_sr * sizeof(float), 0, row_bytes * p.heads,
                             static_cast<size_t>(batch) * p.L, stream);
  return cudaMemset2DAsync(p.dq, p.o_sh * sizeof(float), 0, row_bytes * p.L,
                           static_cast<size_t>(batch) * p.heads, stream);
}

// Zeroes dq, then launches backward_kernel for batch x heads x ceil(S / 64) blocks on
// stream. Returns the first error.
template <int D>
cudaError_t launch_backward(const BwdParams& p, int batch, bool causal, cudaStream_t stream) {
  constexpr int smem = backward_smem<D>();
  cudaError_t e = zero_dq(p, D, batch, stream);
  if (e != cudaSuccess) return e;
  const bool drop = p.dropout.p > 0.f;
  auto kernel = causal
                    ? (drop ? backward_kernel<D, true, true> : backward_kernel<D, true, false>)
                    : (drop ? backward_kernel<D, false, true> : backward_kernel<D, false, false>);
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.S + 63) / 64, p.heads, batch);
  kernel<<<grid, kBwdThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace attn
