// The CUDA fused attention backward for float32 with head size 64 on tensor cores
// (FlashAttention-2's backward through mma.sync m16n8k8 TF32 with the 3xTF32 split, as
// the forward: float32 accuracy). Same contract as backward_kernel of
// ops/cuda/attention_backward_kernels.cuh (which keeps other head sizes).
//
// One block of 4 warps per (batch * head, 64 keys), the blocks of the first key tile
// (the most work when causal) launched first. Warp w owns 16 keys: the m16 rows of its
// tiles. Row r of a warp's tile is key 16w + 2r for r < 8 and 16w + 2(r - 8) + 1 after,
// so the two rows a thread holds (g, g + 8) are two neighbouring keys: one Philox draw
// covers four keys (a thread and its partner lane) and the keys' dropout bits come from
// one draw per query. K and V sit in shared memory in that row order.
//
// Per 64-query tile: S^T = K Q^T and dP^T = V dO^T (warp: 16 keys x 64 queries, in
// registers), P^T = exp(scale S^T - lse), dS^T = P^T (Z dP^T - D) scale; then
//   dV += (P Z)^T dO and dK += dS^T Q straight from the registers: the accumulator
//   layout (rows g / g + 8, columns 2t / 2t + 1) is the A layout (columns t / t + 4)
//   once the contraction over queries takes query 2t as column t and 2t + 1 as t + 4
//   (B's rows follow the same order);
//   dQ += dS K through shared memory (dS^T stored [key][query]), added to the output with
//   atomics (other key blocks add too; the caller zeroes dq).
// Shared-memory rows have pitch 68 floats: the fragment loads (rows g, columns t, and
// rows 2t, columns g) fall in 32 distinct banks.
#pragma once

#include <cstdint>

#include "ops/cuda/attention_backward_kernels.cuh"

namespace attn {

namespace tf32_bwd {

constexpr int kD = 64;      // head size
constexpr int kP = kD + 4;  // row pitch of every shared tile
constexpr int kThreads = 128;

// c (16 rows x 64 columns) = a b^T over kD: a = this warp's 16 rows (pitch kP), b = 64
// rows (pitch kP).
__device__ __forceinline__ void product_rows(float c[8][4], const float* a, const float* b, int g,
                                             int t) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) c[n][i] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kD; kk += 8) {
    uint32_t ah[4], al[4];
    split_a<kP>(a + g * kP + kk + t, ah, al);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      uint32_t bh[2], bl[2];
      const float* br = b + (n * 8 + g) * kP + kk + t;
      split_tf32(br[0], bh[0], bl[0]);
      split_tf32(br[4], bh[1], bl[1]);
      mma_3xtf32(c[n], ah, al, bh, bl);
    }
  }
}

// acc (16 rows x kD) += x b, x = 16 x 64 in accumulator registers (columns 2t, 2t + 1 of
// each n8 tile), b = 64 rows (pitch kP): column t of k8 step n is x's column 8n + 2t and
// b's row 8n + 2t, column t + 4 the ones after them.
__device__ __forceinline__ void accumulate_transposed(float acc[8][4], const float x[8][4],
                                                      const float* b, int g, int t) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    uint32_t ah[4], al[4];
    split_tf32(x[n][0], ah[0], al[0]);
    split_tf32(x[n][2], ah[1], al[1]);
    split_tf32(x[n][1], ah[2], al[2]);
    split_tf32(x[n][3], ah[3], al[3]);
    const float* br = b + (8 * n + 2 * t) * kP + g;
#pragma unroll
    for (int d = 0; d < 8; ++d) {
      uint32_t bh[2], bl[2];
      split_tf32(br[8 * d], bh[0], bl[0]);
      split_tf32(br[kP + 8 * d], bh[1], bl[1]);
      mma_3xtf32(acc[d], ah, al, bh, bl);
    }
  }
}

// Shared-memory row of key k (0..63) of a block's tile: the warp-row order above.
__device__ __forceinline__ int key_row(int k) {
  const int e = k & 15;
  return (k & ~15) | ((e & 1) << 3) | (e >> 1);
}

// Rows [r0, r0 + 64) of a [rows, 64] float matrix (row stride sr) into smem (pitch kP),
// zeros past `limit`; KeyOrder puts row r at key_row(r). 16-byte loads when vec.
template <bool KeyOrder>
__device__ __forceinline__ void load_rows(float* smem, const float* src, int64_t sr, int r0,
                                          int limit, bool vec) {
  for (int c = threadIdx.x; c < 64 * (kD / 4); c += kThreads) {
    const int r = c / (kD / 4), col = (c % (kD / 4)) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r0 + r < limit) {
      const float* s = src + (r0 + r) * sr + col;
      x = vec ? *reinterpret_cast<const float4*>(s) : make_float4(s[0], s[1], s[2], s[3]);
    }
    *reinterpret_cast<float4*>(smem + (KeyOrder ? key_row(r) : r) * kP + col) = x;
  }
}

template <bool Causal, bool Drop>
__global__ void __launch_bounds__(kThreads, 2) backward_tf32_kernel(BwdParams p) {
  extern __shared__ __align__(16) float smem[];
  float* sk = smem;             // K_j, key_row order
  float* sv = sk + 64 * kP;     // V_j, key_row order
  float* sq = sv + 64 * kP;     // Q_i
  float* sdo = sq + 64 * kP;    // dO_i
  float* sds = sdo + 64 * kP;   // dS^T, [key_row][query]
  float* slse = sds + 64 * kP;  // lse * log2(e) per query of the tile
  float* sdi = slse + 64;       // D_i = rowsum(dO * O)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.x;
  const int head = static_cast<int>(bh % p.heads), batch = static_cast<int>(bh / p.heads);
  const int j0 = blockIdx.y * 64;
  const float* q = p.q + batch * p.q_sb + head * p.q_sh;
  const float* k = p.k + batch * p.k_sb + head * p.k_sh;
  const float* v = p.v + batch * p.v_sb + head * p.v_sh;
  const float* gr = p.grad + batch * p.g_sb + head * p.g_sh;
  const float* o = p.packed + bh * p.packed_batch;
  const float* lse = o + static_cast<int64_t>(p.L) * kD;
  float* dq = p.dq + batch * p.o_sb + head * p.o_sh;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  uint64_t seed = 0, offset = 0;
  if constexpr (Drop) load_state(p.dropout, seed, offset);
  // This thread's keys (rows g and g + 8 of its warp's tiles).
  const int key0 = j0 + 16 * warp + 2 * g, key1 = key0 + 1;

  load_rows<true>(sk, k, p.k_sr, j0, p.S, true);
  load_rows<true>(sv, v, p.v_sr, j0, p.S, true);
  float dk[8][4], dv[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) dk[n][i] = dv[n][i] = 0.f;

  const float* kw = sk + 16 * warp * kP;
  const float* vw = sv + 16 * warp * kP;
  for (int i0 = Causal ? j0 : 0; i0 < p.L; i0 += 64) {
    __syncthreads();  // the previous tile's readers are done
    load_rows<false>(sq, q, p.q_sr, i0, p.L, true);
    load_rows<false>(sdo, gr, p.g_sr, i0, p.L, p.grad_vec);
    {  // D_i = rowsum(dO * O) and lse: two threads per query row
      const int r = threadIdx.x / 2, half = threadIdx.x % 2, row = i0 + r;
      float acc = 0.f;
      if (row < p.L) {
        const float* orow = o + static_cast<int64_t>(row) * kD + half * 32;
        const float* grow = gr + static_cast<int64_t>(row) * p.g_sr + half * 32;
#pragma unroll 8
        for (int c = 0; c < 32; ++c) acc = fmaf(orow[c], grow[c], acc);
      }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      if (half == 0) {
        sdi[r] = acc;
        slse[r] = row < p.L ? lse[row] * 1.4426950408889634f : INFINITY;
      }
    }
    __syncthreads();

    // S^T and dP^T for this warp's 16 keys x 64 queries.
    float s[8][4], dp[8][4];
    product_rows(s, kw, sq, g, t);
    product_rows(dp, vw, sdo, g, t);

    // P^T Z into s, dS^T into dp. Element i of tile n: key key0 (i < 2) or key1, query
    // i0 + 8n + 2t + (i & 1).
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      bool keep[4] = {true, true, true, true};  // query 2t: key0, key1; 2t + 1: key0, key1
      if constexpr (Drop) {
        const int qa = i0 + 8 * n + 2 * t;
        if (p.mask_words > 0) {  // the forward's bits: keys key0, key1 share a word
          const uint32_t* words = reinterpret_cast<const uint32_t*>(o + p.mask_offset);
          const int word = key0 / 32, bit = key0 % 32;
          const int64_t at = static_cast<int64_t>(qa) * p.mask_words + word;
          const bool key_in = key0 < p.S;  // else both keys are past S: never live
          const uint32_t w0 = key_in && qa < p.L ? words[at] : 0u;
          const uint32_t w1 = key_in && qa + 1 < p.L ? words[at + p.mask_words] : 0u;
          keep[0] = (w0 >> bit) & 1u;
          keep[1] = (w0 >> (bit + 1)) & 1u;
          keep[2] = (w1 >> bit) & 1u;
          keep[3] = (w1 >> (bit + 1)) & 1u;
        } else {  // drawn again: lanes g, g ^ 1 (lane ^ 4) hold keys 4m .. 4m + 3
          const uint64_t ia = (static_cast<uint64_t>(bh) * p.L + qa) * p.S + key0;
          kept_quad(seed, offset, ia, ia + p.S, p.dropout.p, (p.S & 3) == 0, 4, keep);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int ql = 8 * n + 2 * t + (i & 1), query = i0 + ql;
        const int key = i < 2 ? key0 : key1;
        const bool live = query < p.L && key < p.S && !(Causal && key > query);
        const float pr = live ? exp2f(s[n][i] * scale_log2 - slse[ql]) : 0.f;
        // keep[] is ordered by (query, key); i is (key, query)
        const bool kept_here = keep[(i & 1) * 2 + (i >> 1)];
        const float z = Drop ? (kept_here ? p.dropout.keep_scale : 0.f) : 1.f;
        s[n][i] = pr * z;
        dp[n][i] = pr * (dp[n][i] * z - sdi[ql]) * p.scale;
      }
    }

    // dV += (P Z)^T dO and dK += dS^T Q, contraction over the tile's queries.
    accumulate_transposed(dv, s, sdo, g, t);
    accumulate_transposed(dk, dp, sq, g, t);
    // dS^T to shared memory for dQ.
    float* dsw = sds + 16 * warp * kP;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      *reinterpret_cast<float2*>(dsw + g * kP + 8 * n + 2 * t) = make_float2(dp[n][0], dp[n][1]);
      *reinterpret_cast<float2*>(dsw + (g + 8) * kP + 8 * n + 2 * t) =
          make_float2(dp[n][2], dp[n][3]);
    }
    __syncthreads();

    // dQ (this warp: queries 16w .. 16w + 15 of the tile) = dS K over the 64 key rows;
    // column t of a k8 step is key row kb + 2t, column t + 4 is kb + 2t + 1.
    float acc[8][4];
#pragma unroll
    for (int d = 0; d < 8; ++d)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[d][i] = 0.f;
#pragma unroll
    for (int kb = 0; kb < 64; kb += 8) {
      const float* ar = sds + (kb + 2 * t) * kP + 16 * warp + g;
      uint32_t ah[4], al[4];
      split_tf32(ar[0], ah[0], al[0]);
      split_tf32(ar[8], ah[1], al[1]);
      split_tf32(ar[kP], ah[2], al[2]);
      split_tf32(ar[kP + 8], ah[3], al[3]);
      const float* kr = sk + (kb + 2 * t) * kP + g;
#pragma unroll
      for (int d = 0; d < 8; ++d) {
        uint32_t bh2[2], bl2[2];
        split_tf32(kr[8 * d], bh2[0], bl2[0]);
        split_tf32(kr[kP + 8 * d], bh2[1], bl2[1]);
        mma_3xtf32(acc[d], ah, al, bh2, bl2);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = i0 + 16 * warp + g + 8 * h;
      if (row >= p.L) continue;
      float* dst = dq + row * p.o_sr + 2 * t;
#pragma unroll
      for (int d = 0; d < 8; ++d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float2*>(dst + 8 * d),
                  make_float2(acc[d][2 * h], acc[d][2 * h + 1]));
#else
        atomicAdd(dst + 8 * d, acc[d][2 * h]);
        atomicAdd(dst + 8 * d + 1, acc[d][2 * h + 1]);
#endif
      }
    }
  }

  // dK and dV rows key0 (accumulator rows g) and key1 (rows g + 8).
  float* dkp = p.dk + batch * p.o_sb + head * p.o_sh;
  float* dvp = p.dv + batch * p.o_sb + head * p.o_sh;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = h ? key1 : key0;
    if (key >= p.S) continue;
#pragma unroll
    for (int d = 0; d < 8; ++d) {
      const int64_t at = key * p.o_sr + 8 * d + 2 * t;
      *reinterpret_cast<float2*>(dkp + at) = make_float2(dk[d][2 * h], dk[d][2 * h + 1]);
      *reinterpret_cast<float2*>(dvp + at) = make_float2(dv[d][2 * h], dv[d][2 * h + 1]);
    }
  }
}

constexpr int kSmem = (5 * 64 * kP + 2 * 64) * static_cast<int>(sizeof(float));

// Zeroes dq, then launches backward_tf32_kernel for batch * heads x ceil(S / 64) blocks
// on stream. Returns the first error.
inline cudaError_t launch(const BwdParams& p, int batch, bool causal, cudaStream_t stream) {
  cudaError_t e = zero_dq(p, kD, batch, stream);
  if (e != cudaSuccess) return e;
  const bool drop = p.dropout.p > 0.f;
  auto kernel =
      causal ? (drop ? backward_tf32_kernel<true, true> : backward_tf32_kernel<true, false>)
             : (drop ? backward_tf32_kernel<false, true> : backward_tf32_kernel<false, false>);
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(batch) * p.heads, (p.S + 63) / 64);
  kernel<<<grid, kThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace tf32_bwd

}  // namespace attn
