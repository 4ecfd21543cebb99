// The bfloat16 / float16 attention forward (FlashAttention-2's algorithm), included by
// ops/cuda/attention_kernels.cuh after its helpers (FwdParams, Dropout, mma16, pack2);
// launch_forward sends 16-bit types here. Free of kiln types like it.
//
// One block of 4 warps per (batch * head, 128 queries); each warp owns 32 query rows
// (two m16 tiles, so every K / V fragment read from shared memory feeds two mma.sync
// m16n8k16). Without causal the query tiles of one head are launched side by side
// (its K and V stay in L2); causal, the last tile of every head first (the most keys).
// The block walks BN-key tiles of K and V through a two-stage cp.async pipeline: tile
// j + 1 is in flight while tile j is computed, one __syncthreads per tile. Shared memory
// rows are XOR-swizzled in 16-byte chunks (chunk c of row r at c ^ (r % 8)), so ldmatrix
// (Q and K as A / B fragments, V through ldmatrix.trans) and the cp.async stores are
// free of bank conflicts. QRegs: the Q fragments stay in registers for the whole walk
// (D = 64; at D = 128 they do not fit beside O).
//
// Online softmax in the log2 domain on the raw scores: the running max m is of q.k, p =
// exp2(s * scale_log2 - m * scale_log2) in one FMA and ex2.approx. Masking (keys past S,
// causal) runs only on the tiles that need it; when causal, a warp skips the tiles whose
// keys all follow its rows. Lazy: O is rescaled only when a running max of the warp's
// rows moved. P reaches the second product straight from the accumulator registers (the
// C layout of two n8 tiles is the A layout of one k16 step). Dropout and the packed
// output (result rows, then the logsumexp) as the float32 kernel.
#pragma once

#include <cstdint>

namespace attn {
namespace fwd16 {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBM = 32 * kWarps;  // queries per block

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
// Element offset of (row, col) in a swizzled [rows, D] tile; col a multiple of 8.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + (((col >> 3) ^ (row & 7)) << 3);
}
// 16 bytes global -> shared, zeros when !valid (src-size 0: src is not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Starts the copy of rows [r0, r0 + Rows) of a [rows, D] matrix (row stride sr) into the
// swizzled smem tile at shared address dst, zeros past `limit` rows. All threads of the
// block take part; a thread copies the same 16-byte chunk of every kPass-th row, whose
// swizzled place is the same in each (kPass is a multiple of 8).
template <class T, int D, int Rows>
__device__ __forceinline__ void load_async(uint32_t dst, const T* src, int64_t sr, int r0,
                                           int limit) {
  constexpr int kChunks = D / 8, kPass = kThreads / kChunks;
  static_assert(Rows % kPass == 0 && kPass % 8 == 0, "whole passes, one swizzle");
  const int row = threadIdx.x / kChunks, col = (threadIdx.x % kChunks) * 8;
  dst += swz<D>(row, col) * sizeof(T);
  const T* from = src + (r0 + row) * sr + col;
#pragma unroll
  for (int i = 0; i < Rows / kPass; ++i) {
    const bool ok = r0 + row + i * kPass < limit;
    cp_async16(dst + i * kPass * D * sizeof(T), ok ? from + i * kPass * sr : src, ok);
  }
}

template <class T, int D, int BN, bool QRegs, bool Lazy, bool Causal, bool Drop>
__global__ void __launch_bounds__(kThreads) forward16_kernel(FwdParams p) {
  constexpr int kNT = BN / 8;  // n8 tiles of S
  constexpr int kDT = D / 8;   // n8 tiles of O
  constexpr int kKT = D / 16;  // k16 steps of Q K^T
  constexpr uint32_t kRowBytes = D * sizeof(T), kStage = BN * kRowBytes;
  // 1024-byte aligned, so that the tiles' addresses below hold the swizzle in bits 4-7.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sq = smem_u32(smem_raw);
  const uint32_t sk = sq + kBM * kRowBytes;  // two stages of [BN, D]
  const uint32_t sv = sk + 2 * kStage;       // two stages of [BN, D]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // Which (batch * head, query tile): without causal, the n tiles of one head side by
  // side (blocks b: head b / n, tile b % n), sharing its K, V in L2; causal, the longest
  // first (the last tile of every head, then the one before, ...), which evens the tail.
  const int n_tiles = (p.L + kBM - 1) / kBM;
  const int n_bh = static_cast<int>(gridDim.x) / n_tiles;
  const int tile = Causal ? n_tiles - 1 - static_cast<int>(blockIdx.x) / n_bh
                          : static_cast<int>(blockIdx.x) % n_tiles;
  const int bh =
      Causal ? static_cast<int>(blockIdx.x) % n_bh : static_cast<int>(blockIdx.x) / n_tiles;
  const int i0 = tile * kBM;
  const int head = bh % p.heads, batch = bh / p.heads;
  const T* q = static_cast<const T*>(p.q) + batch * p.q_sb + head * p.q_sh;
  const T* k = static_cast<const T*>(p.k) + batch * p.k_sb + head * p.k_sh;
  const T* v = static_cast<const T*>(p.v) + batch * p.v_sb + head * p.v_sh;
  T* out = static_cast<T*>(p.out) + (static_cast<int64_t>(batch) * p.heads + head) * p.out_batch;

  const int key_end = Causal ? min(p.S, i0 + kBM) : p.S;
  const int tiles = (key_end + BN - 1) / BN;
  load_async<T, D, kBM>(sq, q, p.q_sr, i0, p.L);
  load_async<T, D, BN>(sk, k, p.k_sr, 0, p.S);
  load_async<T, D, BN>(sv, v, p.v_sr, 0, p.S);
  cp_async_commit();

  // The lane's ldmatrix row and 16-byte chunk in its first 16 x 16 block: A (Q) tiles
  // [16 rows][k 0-7 | 8-15]; K as B: [n 0-7 | 8-15][k 0-7 | 8-15]; V (trans) as B:
  // [keys 0-7 | 8-15][d 0-7 | 8-15]. Every row is 8-aligned plus lane % 8, so the chunk
  // of block column c (16 elements, 2 chunks) sits at (chunk0 ^ (lane % 8)) ^ 2c: the
  // address of block (r, c) is base ^ 32c plus r times 16 rows.
  const uint32_t r7 = lane & 7;
  const uint32_t a_off = (warp * 32 + (lane & 15)) * kRowBytes + (((lane >> 4) ^ r7) << 4);
  const uint32_t k_off = (((lane >> 4) << 3) + r7) * kRowBytes + ((((lane >> 3) & 1) ^ r7) << 4);
  const uint32_t v_off = ((((lane >> 3) & 1) << 3) + r7) * kRowBytes + (((lane >> 4) ^ r7) << 4);

  float o[2][kDT][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int d = 0; d < kDT; ++d)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mi][d][i] = 0.f;
  float m[2][2], l[2][2];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) m[mi][r] = -INFINITY, l[mi][r] = 0.f;
  const int wrow = i0 + warp * 32;  // the thread's rows: wrow + 16 mi + g + 8 r
  const float scale = p.scale_log2;

  uint64_t seed = 0, offset = 0;
  if constexpr (Drop) load_state(p.dropout, seed, offset);
  const uint64_t drop_row0 =  // row-major index of (wrow + g, 0) in [batch, heads, L, S]
      ((static_cast<uint64_t>(batch) * p.heads + head) * p.L + wrow + g) *
      static_cast<uint64_t>(p.S);

  uint32_t qf[QRegs ? 2 : 1][QRegs ? kKT : 1][4];
  for (int it = 0; it < tiles; ++it) {
    const int j0 = it * BN;
    cp_async_wait_all();
    __syncthreads();  // tile it landed for everyone; tile it - 1's stage is free
    if (it + 1 < tiles) {
      const int st = (it + 1) & 1;
      load_async<T, D, BN>(sk + st * kStage, k, p.k_sr, j0 + BN, p.S);
      load_async<T, D, BN>(sv + st * kStage, v, p.v_sr, j0 + BN, p.S);
    }
    cp_async_commit();
    if constexpr (QRegs) {
      if (it == 0) {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int kk = 0; kk < kKT; ++kk)
            ldsm_x4(qf[mi][kk], ((sq + a_off) ^ (32 * kk)) + mi * 16 * kRowBytes);
      }
    }
    if (Causal && j0 > wrow + 31) continue;  // every key of the tile follows the warp's rows
    const uint32_t ka = sk + (it & 1) * kStage + k_off, va = sv + (it & 1) * kStage + v_off;
    uint32_t qa = sq + a_off;
    asm volatile("" : "+r"(qa));  // opaque: its kKT XORs stay in the loop, not in registers

    // S = Q K^T
    float s[2][kNT][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int n = 0; n < kNT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mi][n][i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if constexpr (QRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mi][i] = qf[mi][kk][i];
        } else {
          ldsm_x4(a[mi], (qa ^ (32 * kk)) + mi * 16 * kRowBytes);
        }
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, (ka ^ (32 * kk)) + np * 16 * kRowBytes);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma16(s[mi][2 * np], a[mi], b, static_cast<T*>(nullptr));
          mma16(s[mi][2 * np + 1], a[mi], b + 2, static_cast<T*>(nullptr));
        }
      }
    }
    // Mask (only the tiles that reach past S or the diagonal), running max per row.
    if (j0 + BN > p.S || (Causal && j0 + BN - 1 > wrow)) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < kNT; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int row = wrow + 16 * mi + g + (i >= 2 ? 8 : 0);
            const int col = j0 + n * 8 + 2 * t + (i & 1);
            if (col >= p.S || (Causal && col > row)) s[mi][n][i] = -INFINITY;
          }
    }
    float shift[2][2];  // the new max, scaled (0 while a row has no key: p = 0, not NaN)
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      float mx[2] = {m[mi][0], m[mi][1]}, alpha[2];
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        mx[0] = fmaxf(mx[0], fmaxf(s[mi][n][0], s[mi][n][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[mi][n][2], s[mi][n][3]));
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        shift[mi][r] = mx[r] == -INFINITY ? 0.f : mx[r] * scale;
        alpha[r] = ex2(m[mi][r] * scale - shift[mi][r]);  // m = -inf: 0
        m[mi][r] = mx[r];
        l[mi][r] *= alpha[r];
      }
      // Lazy (not causal): rescale O only when a max of the warp's 16 rows moved (alpha
      // is 1 exactly otherwise), rare in the later tiles of long rows; the vote costs
      // more than it saves on short rows (measured: D = 64, L = 1024) and when causal.
      if (!(Lazy && !Causal) || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int d = 0; d < kDT; ++d)
#pragma unroll
          for (int i = 0; i < 4; ++i) o[mi][d][i] *= alpha[i >> 1];
      }
#pragma unroll
      for (int n = 0; n < kNT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[mi][n][i] = ex2(fmaf(s[mi][n][i], scale, -shift[mi][i >> 1]));
          l[mi][i >> 1] += s[mi][n][i];
        }
    }
    if constexpr (Drop) {  // after the sums: l normalizes every weight
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        uint32_t bits[2][BN / 32] = {};  // [rows g, g + 8][32-key words of the tile]
#pragma unroll
        for (int n = 0; n < kNT; ++n) {
          const uint64_t index = drop_row0 + 16ull * mi * p.S + j0 + n * 8 + 2 * t;
          bool keep[4];
          kept_quad(seed, offset, index, index + 8ull * p.S, p.dropout.p, (p.S & 3) == 0, 1, keep);
#pragma unroll
          for (int i = 0; i < 4; ++i)
            s[mi][n][i] = keep[i] ? s[mi][n][i] * p.dropout.keep_scale : 0.f;
          const int bit = 8 * (n % 4) + 2 * t;
          bits[0][n / 4] |= (uint32_t{keep[0]} << bit) | (uint32_t{keep[1]} << (bit + 1));
          bits[1][n / 4] |= (uint32_t{keep[2]} << bit) | (uint32_t{keep[3]} << (bit + 1));
        }
        if (p.mask_words > 0) {  // the quad's bits of its two rows to the mask rows
          uint32_t* words = reinterpret_cast<uint32_t*>(out + p.mask_offset);
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int w = 0; w < BN / 32; ++w) {
              bits[r][w] |= __shfl_xor_sync(0xffffffffu, bits[r][w], 1);
              bits[r][w] |= __shfl_xor_sync(0xffffffffu, bits[r][w], 2);
              const int row = wrow + 16 * mi + g + 8 * r, word = j0 / 32 + w;
              if (t == 0 && row < p.L && word < p.mask_words)
                words[static_cast<int64_t>(row) * p.mask_words + word] = bits[r][w];
            }
        }
      }
    }
    // O += P V, P packed from the accumulators.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        a[mi][0] = pack2(s[mi][2 * kk][0], s[mi][2 * kk][1], static_cast<T*>(nullptr));
        a[mi][1] = pack2(s[mi][2 * kk][2], s[mi][2 * kk][3], static_cast<T*>(nullptr));
        a[mi][2] = pack2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1], static_cast<T*>(nullptr));
        a[mi][3] = pack2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3], static_cast<T*>(nullptr));
      }
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_trans(b, (va ^ (32 * dp)) + kk * 16 * kRowBytes);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma16(o[mi][2 * dp], a[mi], b, static_cast<T*>(nullptr));
          mma16(o[mi][2 * dp + 1], a[mi], b + 2, static_cast<T*>(nullptr));
        }
      }
    }
  }
  // Finish: the quad's partial sums, out = o / l, lse = (m scale + log2 l) ln 2.
  float* lse = reinterpret_cast<float*>(out + static_cast<int64_t>(p.L) * D);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mi][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = wrow + 16 * mi + g + 8 * r;
      if (row >= p.L) continue;
      const float inv = 1.f / sum;  // every key dropped: 0 / 0 = NaN, as softmax gives
#pragma unroll
      for (int d = 0; d < kDT; ++d)
        store2(out + static_cast<int64_t>(row) * D + d * 8 + 2 * t, o[mi][d][2 * r] * inv,
               o[mi][d][2 * r + 1] * inv);
      if (t == 0) lse[row] = (m[mi][r] * scale + log2f(sum)) * 0.6931471805599453f;
    }
}

template <int D, int BN>
constexpr int smem_bytes() {
  return (kBM + 4 * BN) * D * 2;
}

// Launches forward16_kernel<T, D, BN, QRegs, Lazy> for batch * heads x ceil(L / kBM)
// blocks. Returns the launch error (cudaFuncSetAttribute's first).
template <class T, int D, int BN, bool QRegs, bool Lazy>
cudaError_t launch(const FwdParams& p, int batch, bool causal, cudaStream_t stream) {
  constexpr int smem = smem_bytes<D, BN>();
  const bool drop = p.dropout.p > 0.f;
  auto kernel = causal ? (drop ? forward16_kernel<T, D, BN, QRegs, Lazy, true, true>
                               : forward16_kernel<T, D, BN, QRegs, Lazy, true, false>)
                       : (drop ? forward16_kernel<T, D, BN, QRegs, Lazy, false, true>
                               : forward16_kernel<T, D, BN, QRegs, Lazy, false, false>);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const unsigned grid = static_cast<unsigned>(batch) * p.heads * ((p.L + kBM - 1) / kBM);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fwd16
}  // namespace attn
