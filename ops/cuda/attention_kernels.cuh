// The CUDA fused attention forward (FlashAttention-2's algorithm), free of kiln types
// so that a standalone harness (bench/cuda/attention_harness.cu) compiles it too.
// bfloat16 / float16 run the pipelined kernel of ops/cuda/attention_fwd16.cuh
// (cp.async double buffering, ldmatrix, swizzled shared memory, 128 queries a block);
// this file holds the shared helpers and the float32 kernel, described here.
//
// float32: one block of 4 warps per (batch * head, 64 queries), the last query tiles
// (the most work when causal) launched first; each warp owns 16 query rows. The block
// walks 64-key tiles of K and V staged in shared memory (tiles past the diagonal
// skipped when causal); S = Q K^T and O += P V run on tensor cores through mma.sync
// m16n8k8 TF32 with the 3xTF32 split (x = hi + lo, hi*hi + hi*lo + lo*hi), which keeps
// float32 accuracy. Online softmax in the log2 domain: each thread keeps the running max
// of its two rows (shared by the 4 threads of a quad through shuffles), rescales its
// output accumulators by exp2(m_old - m_new) and sums exp2(s - m) into a per-thread
// partial that the quad reduces once at the end. P goes through shared memory to the
// second product. (The kernel also instantiates for 16-bit types, m16n8k16 with P
// straight from the accumulators: launch_forward_simple, the reference that
// bench/cuda/attention_tune.cu checks the fwd16 kernel against.)
//
// Output: packed [batch * heads, L + R, D] (ops/attention_layout.h): rows [0, L) the
// result, then the float logsumexp (natural log) of each query row at element L * D.
//
// Dropout (the Drop template flag): the normalizer l sums every p; the P V product takes
// p / (1 - dropout_p) where kept() holds for the element's row-major index in the
// [batch, heads, L, S] probabilities, else 0. kept() compares kiln.rand's float32 value
// at that index for the (seed, offset) with dropout_p, so the mask is the one the
// composite softmax -> dropout -> matmul draws with the same generator state.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ops/philox.h"

namespace attn {

constexpr int kRows = 64;  // queries per block
constexpr int kCols = 64;  // keys per tile
constexpr int kThreads = 128;

// Attention dropout: element index -> kept or not, and the scale of the kept ones.
struct Dropout {
  float p = 0.f;           // drop probability (keep when the uniform draw >= p)
  float keep_scale = 1.f;  // 1 / (1 - p), rounded to float as dropout's multiply is
  uint64_t seed = 0, offset = 0;
  // Set while a CUDA graph records the call: (seed, offset) are read here at run time
  // (the graph rewrites them every replay) instead of from the fields above.
  const uint64_t* slot = nullptr;
};
__device__ __forceinline__ void load_state(const Dropout& d, uint64_t& seed, uint64_t& offset) {
  seed = d.slot ? d.slot[0] : d.seed;
  offset = d.slot ? d.slot[1] : d.offset;
}
// kiln.rand's float32 value from its word (ops/philox.h rand_value, 24 bits) >= p.
__device__ __forceinline__ bool kept_word(uint32_t w, float p) {
  return static_cast<float>(w >> 8) * (1.0f / 16777216.0f) >= p;
}
// The same for element `index`: word index % 4 of draw index / 4.
__device__ __forceinline__ bool kept(uint64_t seed, uint64_t offset, uint64_t index, float p) {
  return kept_word(kiln::philox::word_of(kiln::philox::draw(seed, offset, index >> 2),
                                         static_cast<uint32_t>(index & 3)),
                   p);
}
// Elements index and index + 1, one draw when they share it (index even).
__device__ __forceinline__ void kept_pair(uint64_t seed, uint64_t offset, uint64_t index, float p,
                                          bool& k0, bool& k1) {
  if ((index & 1) == 0) {
    const kiln::philox::Uint4 r = kiln::philox::draw(seed, offset, index >> 2);
    const uint32_t w = static_cast<uint32_t>(index & 3);
    k0 = kept_word(kiln::philox::word_of(r, w), p);
    k1 = kept_word(kiln::philox::word_of(r, w + 1), p);
  } else {
    k0 = kept(seed, offset, index, p);
    k1 = kept(seed, offset, index + 1, p);
  }
}

// The dropout bits of two rows x two neighbouring columns a lane holds: elements ia,
// ia + 1 (keep[0], keep[1]) and ib, ib + 1 (keep[2], keep[3]). With `shared`, the
// partner lane (lane ^ partner) holds the other half of the same four-element draws
// (ia % 4 is 0 in one lane and 2 in the other): each lane draws one of the two rows
// and trades two words, one draw per four elements. Every lane of the warp calls it.
__device__ __forceinline__ void kept_quad(uint64_t seed, uint64_t offset, uint64_t ia, uint64_t ib,
                                          float p, bool shared, int partner, bool keep[4]) {
  if (shared) {
    const bool high = (ia & 2) != 0;  // words z, w are this lane's
    const kiln::philox::Uint4 w = kiln::philox::draw(seed, offset, (high ? ib : ia) >> 2);
    const uint32_t own0 = high ? w.z : w.x, own1 = high ? w.w : w.y;
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, high ? w.x : w.z, partner);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, high ? w.y : w.w, partner);
    keep[0] = kept_word(high ? got0 : own0, p);
    keep[1] = kept_word(high ? got1 : own1, p);
    keep[2] = kept_word(high ? own0 : got0, p);
    keep[3] = kept_word(high ? own1 : got1, p);
  } else {
    kept_pair(seed, offset, ia, p, keep[0], keep[1]);
    kept_pair(seed, offset, ib, p, keep[2], keep[3]);
  }
}

struct FwdParams {
  const void *q, *k, *v;
  void* out;
  // element strides: batch, head, row (the last dim is contiguous)
  int64_t q_sb, q_sh, q_sr, k_sb, k_sh, k_sr, v_sb, v_sh, v_sr;
  int64_t out_batch;  // elements between (batch, head) entries of out: (L + R) * D
  int heads, L, S;
  float scale_log2;  // scale * log2(e)
  Dropout dropout;   // used by the Dropout instantiations only
  // Dropout instantiations with mask_words > 0: the mask's bits go to elements
  // [mask_offset, ...) of each out entry (ops/attention_layout.h), mask_words a query.
  int64_t mask_offset;
  int mask_words;
};

__device__ __forceinline__ uint32_t pack2(float a, float b, __nv_bfloat16*) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, __half*) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_raw(__nv_bfloat16 a, __nv_bfloat16 b) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(a)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(b)) << 16);
}
__device__ __forceinline__ uint32_t pack_raw(__half a, __half b) {
  return static_cast<uint32_t>(__half_as_ushort(a)) |
         (static_cast<uint32_t>(__half_as_ushort(b)) << 16);
}

__device__ __forceinline__ void mma16(float c[4], const uint32_t a[4], const uint32_t b[2],
                                      __nv_bfloat16*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma16(float c[4], const uint32_t a[4], const uint32_t b[2],
                                      __half*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
// x = hi + lo: hi rounded to TF32, lo passed whole (the tensor core reads its top 19
// bits; |lo| <= 2^-11 |x|): one conversion and one subtraction.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = to_tf32(x);
  lo = __float_as_uint(x - __uint_as_float(hi));
}
// c += a b in about float32 accuracy from split operands: three TF32 products
// (hi*hi + hi*lo + lo*hi, the small ones first).
__device__ __forceinline__ void mma_3xtf32(float c[4], const uint32_t ah[4], const uint32_t al[4],
                                           const uint32_t bh[2], const uint32_t bl[2]) {
  mma_tf32(c, al, bh);
  mma_tf32(c, ah, bl);
  mma_tf32(c, ah, bh);
}
// The A fragment of m16n8k8 (rows g, g + 8; columns t, t + 4) of a row-major tile whose
// row g, column t is at a (pitch P), split.
template <int P>
__device__ __forceinline__ void split_a(const float* a, uint32_t ah[4], uint32_t al[4]) {
  split_tf32(a[0], ah[0], al[0]);
  split_tf32(a[8 * P], ah[1], al[1]);
  split_tf32(a[4], ah[2], al[2]);
  split_tf32(a[8 * P + 4], ah[3], al[3]);
}

// Copies rows [r0, r0 + 64) of a [rows, D] matrix (row stride sr) into smem (row pitch
// P), zeros past `limit` rows. 16-byte vectors; all threads of the block take part.
template <class T, int D, int P>
__device__ __forceinline__ void load_tile(T* smem, const T* src, int64_t sr, int r0, int limit) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kChunks = D / kVec;
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * kVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < limit) v = *reinterpret_cast<const uint4*>(src + (r0 + r) * sr + col);
    *reinterpret_cast<uint4*>(smem + r * P + col) = v;
  }
}

template <class T>
__device__ __forceinline__ void store2(T* p, float a, float b) {
  if constexpr (sizeof(T) == 4) {
    p[0] = a;
    p[1] = b;
  } else {
    *reinterpret_cast<uint32_t*>(p) = pack2(a, b, static_cast<T*>(nullptr));
  }
}

template <class T, int D, bool Causal, bool Drop>
__global__ void __launch_bounds__(kThreads) forward_kernel(FwdParams p) {
  constexpr bool kF32 = sizeof(T) == 4;
  constexpr int kPad = 16 / sizeof(T);
  constexpr int kP = D + kPad;    // smem row pitch of Q, K, V
  constexpr int kNT = kCols / 8;  // n8 tiles of S
  constexpr int kDT = D / 8;      // n8 tiles of O
  constexpr int kPP = kCols + 4;  // float32 P pitch
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + kRows * kP;
  T* sv = sk + kCols * kP;
  float* sp = reinterpret_cast<float*>(sv + kCols * kP);  // float32 only: [4][16][kPP]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  // The last query tile (the most keys when causal) first: blockIdx.y counts down.
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int head = static_cast<int>(blockIdx.x % p.heads);
  const int batch = static_cast<int>(blockIdx.x / p.heads);
  const T* q = static_cast<const T*>(p.q) + batch * p.q_sb + head * p.q_sh;
  const T* k = static_cast<const T*>(p.k) + batch * p.k_sb + head * p.k_sh;
  const T* v = static_cast<const T*>(p.v) + batch * p.v_sb + head * p.v_sh;
  T* out = static_cast<T*>(p.out) + (static_cast<int64_t>(batch) * p.heads + head) * p.out_batch;

  load_tile<T, D, kP>(sq, q, p.q_sr, i0, p.L);
  float o[kDT][4];
#pragma unroll
  for (int d = 0; d < kDT; ++d)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[d][i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row0 = i0 + warp * 16 + g;  // this thread's rows: row0, row0 + 8
  const T* qw = sq + warp * 16 * kP;

  uint64_t seed = 0, offset = 0;
  if constexpr (Drop) load_state(p.dropout, seed, offset);
  // Row-major index of (row, 0) in the [batch, heads, L, S] probabilities.
  const uint64_t drop_row0 =
      ((static_cast<uint64_t>(batch) * p.heads + head) * p.L + row0) * static_cast<uint64_t>(p.S);

  const int key_end = Causal ? min(p.S, i0 + kRows) : p.S;
  for (int j0 = 0; j0 < key_end; j0 += kCols) {
    __syncthreads();  // the previous tile's readers are done
    load_tile<T, D, kP>(sk, k, p.k_sr, j0, p.S);
    load_tile<T, D, kP>(sv, v, p.v_sr, j0, p.S);
    __syncthreads();
    float s[kNT][4];
#pragma unroll
    for (int n = 0; n < kNT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0.f;
    if constexpr (kF32) {
#pragma unroll
      for (int kk = 0; kk < D; kk += 8) {
        uint32_t ah[4], al[4];
        split_a<kP>(qw + g * kP + kk + t, ah, al);
#pragma unroll
        for (int n = 0; n < kNT; ++n) {
          const float* kr = sk + (n * 8 + g) * kP + kk + t;
          uint32_t bh[2], bl[2];
          split_tf32(kr[0], bh[0], bl[0]);
          split_tf32(kr[4], bh[1], bl[1]);
          mma_3xtf32(s[n], ah, al, bh, bl);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D; kk += 16) {
        uint32_t a[4];
        a[0] = *reinterpret_cast<const uint32_t*>(qw + g * kP + kk + 2 * t);
        a[1] = *reinterpret_cast<const uint32_t*>(qw + (g + 8) * kP + kk + 2 * t);
        a[2] = *reinterpret_cast<const uint32_t*>(qw + g * kP + kk + 2 * t + 8);
        a[3] = *reinterpret_cast<const uint32_t*>(qw + (g + 8) * kP + kk + 2 * t + 8);
#pragma unroll
        for (int n = 0; n < kNT; ++n) {
          const T* kr = sk + (n * 8 + g) * kP + kk + 2 * t;
          const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(kr),
                                 *reinterpret_cast<const uint32_t*>(kr + 8)};
          mma16(s[n], a, b, static_cast<T*>(nullptr));
        }
      }
    }
    // Scale into the log2 domain, mask, and take the running max per row.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + (i >= 2 ? 8 : 0), col = j0 + n * 8 + 2 * t + (i & 1);
        float x = s[n][i] * p.scale_log2;
        if (col >= p.S || (Causal && col > row)) x = -INFINITY;
        s[n][i] = x;
        mx[i >> 1] = fmaxf(mx[i >> 1], x);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    float alpha[2], shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      shift[r] = mx[r] == -INFINITY ? 0.f : mx[r];  // no key yet: p = 0, never NaN
      alpha[r] = exp2f(m[r] - shift[r]);            // m = -inf: 0
      m[r] = mx[r];
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[n][i] = exp2f(s[n][i] - shift[i >> 1]);
        l[i >> 1] += s[n][i];
      }
    }
    if constexpr (Drop) {                          // after the sums: l normalizes every weight
      uint32_t bits[2][2] = {{0u, 0u}, {0u, 0u}};  // [row0, row0 + 8][keys j0.., j0 + 32..]
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        // rows row0 (s[n][0..1]) and row0 + 8 (s[n][2..3]); lanes t, t ^ 1 hold 4 keys
        const uint64_t index = drop_row0 + j0 + n * 8 + 2 * t;
        bool keep[4];
        kept_quad(seed, offset, index, index + 8ull * p.S, p.dropout.p, (p.S & 3) == 0, 1, keep);
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n][i] = keep[i] ? s[n][i] * p.dropout.keep_scale : 0.f;
        const int bit = 8 * (n % 4) + 2 * t;
        bits[0][n / 4] |= (uint32_t{keep[0]} << bit) | (uint32_t{keep[1]} << (bit + 1));
        bits[1][n / 4] |= (uint32_t{keep[2]} << bit) | (uint32_t{keep[3]} << (bit + 1));
      }
      if (p.mask_words > 0) {  // the quad's bits of rows row0, row0 + 8 to the mask rows
        uint32_t* words = reinterpret_cast<uint32_t*>(out + p.mask_offset);
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int w = 0; w < 2; ++w) {
            bits[r][w] |= __shfl_xor_sync(0xffffffffu, bits[r][w], 1);
            bits[r][w] |= __shfl_xor_sync(0xffffffffu, bits[r][w], 2);
            const int row = row0 + 8 * r, word = j0 / 32 + w;
            if (t == 0 && row < p.L && word < p.mask_words)
              words[static_cast<int64_t>(row) * p.mask_words + word] = bits[r][w];
          }
      }
    }
#pragma unroll
    for (int d = 0; d < kDT; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
    // O += P V
    if constexpr (kF32) {
      float* pw = sp + warp * 16 * kPP;
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        pw[g * kPP + n * 8 + 2 * t] = s[n][0];
        pw[g * kPP + n * 8 + 2 * t + 1] = s[n][1];
        pw[(g + 8) * kPP + n * 8 + 2 * t] = s[n][2];
        pw[(g + 8) * kPP + n * 8 + 2 * t + 1] = s[n][3];
      }
      __syncwarp();
#pragma unroll
      for (int kk = 0; kk < kCols; kk += 8) {
        uint32_t ah[4], al[4];
        split_a<kPP>(pw + g * kPP + kk + t, ah, al);
#pragma unroll
        for (int d = 0; d < kDT; ++d) {
          uint32_t bh[2], bl[2];
          split_tf32(sv[(kk + t) * kP + d * 8 + g], bh[0], bl[0]);
          split_tf32(sv[(kk + t + 4) * kP + d * 8 + g], bh[1], bl[1]);
          mma_3xtf32(o[d], ah, al, bh, bl);
        }
      }
      __syncwarp();
    } else {
#pragma unroll
      for (int kk = 0; kk < kCols / 16; ++kk) {
        const uint32_t a[4] = {pack2(s[2 * kk][0], s[2 * kk][1], static_cast<T*>(nullptr)),
                               pack2(s[2 * kk][2], s[2 * kk][3], static_cast<T*>(nullptr)),
                               pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], static_cast<T*>(nullptr)),
                               pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], static_cast<T*>(nullptr))};
        const T* vr = sv + (kk * 16 + 2 * t) * kP + g;
#pragma unroll
        for (int d = 0; d < kDT; ++d) {
          const T* c = vr + d * 8;
          const uint32_t b[2] = {pack_raw(c[0], c[kP]), pack_raw(c[8 * kP], c[9 * kP])};
          mma16(o[d], a, b, static_cast<T*>(nullptr));
        }
      }
    }
  }
// Finish: the quad's partial sums, out = o / l, lse = (m + log2 l) * ln 2.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  float* lse = reinterpret_cast<float*>(out + static_cast<int64_t>(p.L) * D);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + r * 8;
    if (row >= p.L) continue;
    const float inv = 1.f / l[r];  // every key dropped: 0 / 0 = NaN, as softmax gives
#pragma unroll
    for (int d = 0; d < kDT; ++d)
      store2(out + static_cast<int64_t>(row) * D + d * 8 + 2 * t, o[d][2 * r] * inv,
             o[d][2 * r + 1] * inv);
    if (t == 0) lse[row] = (m[r] + log2f(l[r])) * 0.6931471805599453f;
  }
}

// Dynamic shared memory of forward_kernel<T, D>.
template <class T, int D>
constexpr int forward_smem() {
  return (kRows + 2 * kCols) * (D + 16 / static_cast<int>(sizeof(T))) * sizeof(T) +
         (sizeof(T) == 4 ? 4 * 16 * (kCols + 4) * 4 : 0);
}

}  // namespace attn

#include "ops/cuda/attention_fwd16.cuh"  // needs the helpers above

namespace attn {

// Launches forward_kernel for batch * heads x ceil(L / 64) blocks on stream. Returns
// the launch error (cudaFuncSetAttribute's first).
template <class T, int D>
cudaError_t launch_forward_simple(const FwdParams& p, int batch, bool causal, cudaStream_t stream) {
  constexpr int smem = forward_smem<T, D>();
  const bool drop = p.dropout.p > 0.f;
  auto kernel =
      causal ? (drop ? forward_kernel<T, D, true, true> : forward_kernel<T, D, true, false>)
             : (drop ? forward_kernel<T, D, false, true> : forward_kernel<T, D, false, false>);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(batch) * p.heads, (p.L + kRows - 1) / kRows);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// The forward: float32 through launch_forward_simple, bfloat16 / float16 through
// fwd16::launch, 64-key tiles; D = 64 with Q in registers, D = 128 with the lazy
// rescale (the fastest measured on an H200: bench/cuda/attention_tune.cu).
template <class T, int D>
cudaError_t launch_forward(const FwdParams& p, int batch, bool causal, cudaStream_t stream) {
  if constexpr (sizeof(T) == 2)
    return fwd16::launch<T, D, 64, D == 64, D == 128>(p, batch, causal, stream);
  else
    return launch_forward_simple<T, D>(p, batch, causal, stream);
}

}  // namespace attn
