// CPU fused attention (layout: ops/attention_layout.h), FlashAttention-2's algorithm on
// tiles whose products are single-threaded BLAS calls (ops/cpu/blas_gemm.h) and whose
// row work (scale, mask, exp, rescale) runs in flat loops over a tile row with the SIMD
// exp of ops/cpu/simd.h.
//
// Forward: one task per (batch, block of kQueryBlock queries). The task walks the key
// blocks (those past the diagonal skipped when causal) keeping each row's running max m
// and sum l of exp(s - m); the output accumulator is rescaled by exp(m_old - m_new) when
// the max grows (online softmax). It writes out = acc / l and lse = m + log l.
// Backward: one task per batch (head). It walks the key blocks; for each, the query
// blocks that can see it: P = exp(s - lse) from the saved lse (no second softmax),
// dV += P^T dO, dP = dO V^T, dS = P (dP - D) with D = rowsum(dO * O), dQ += dS K * scale,
// dK += dS^T Q * scale. Everything computes in float (double for float64); 16-bit
// inputs are converted to float first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/attention_layout.h"
#include "ops/cpu/blas_gemm.h"
#include "ops/cpu/kernel_io.h"
#include "ops/cpu/simd.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 128;

// Element offsets of each batch entry of t (its leading dims before the last two).
std::vector<int64_t> batch_offsets(const Tensor& t, const Dims& batch) {
  std::vector<int64_t> out(static_cast<size_t>(dims_numel(batch)), 0);
  for (size_t b = 0; b < out.size(); ++b) {
    int64_t rest = static_cast<int64_t>(b), off = 0;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      off += (rest % batch[d]) * t.stride(d);
      rest /= batch[d];
    }
    out[b] = off;
  }
  return out;
}

// A batch of row-major matrices with unit column stride, read in compute type C.
template <class C>
struct Matrices {
  Tensor t;  // keeps the (possibly converted) storage alive
  const C* data = nullptr;
  std::vector<int64_t> offsets;
  int64_t row_stride = 0;

  Matrices(const Tensor& src, const Dims& batch) {
    const bool direct = src.dtype() == dtype_of<C>() && src.stride(-1) == 1;
    t = direct ? src : kernel_contiguous(src, dtype_of<C>());
    data = t.data<C>();
    offsets = batch_offsets(t, batch);
    row_stride = t.size(-2) > 1 ? t.stride(-2) : t.size(-1);
  }
  const C* at(int64_t b) const { return data + offsets[static_cast<size_t>(b)]; }
  GemmOperand rows(int64_t b, int64_t r0, int64_t n, int64_t cols) const {
    return {at(b) + r0 * row_stride, n, cols, row_stride, 1};
  }
  // The transpose of rows r0..r0+n: a cols x n operand.
  GemmOperand rows_t(int64_t b, int64_t r0, int64_t n, int64_t cols) const {
    return {at(b) + r0 * row_stride, cols, n, 1, row_stride};
  }
};

// The scores' additions: the causal cut, a bool mask (false: -inf) or a float mask (+).
template <class C>
struct ScoreMask {
  bool causal = false;
  Tensor mask;  // undefined: none; bool, or converted to C
  std::vector<int64_t> offsets;
  int64_t row_stride = 0, col_stride = 0;

  ScoreMask(const OpCall& call, const AttentionShape& s) : causal(call.attrs.causal) {
    if (!s.has_mask) return;
    const Tensor& m = call.inputs.back();
    mask = m.dtype() == DType::Bool || m.dtype() == dtype_of<C>()
               ? m
               : kernel_contiguous(m, dtype_of<C>());
    offsets = batch_offsets(mask, s.batch);
    row_stride = mask.stride(-2);
    col_stride = mask.stride(-1);
  }

  // Row i of batch b, keys j0..j0+n: s[j] = s[j] * scale, then masked.
  void apply(int64_t b, int64_t i, int64_t j0, int64_t n, C scale, C* s) const {
    if (scale != C(1))
      for (int64_t j = 0; j < n; ++j) s[j] *= scale;
    constexpr C kNegInf = -std::numeric_limits<C>::infinity();
    if (causal)
      for (int64_t j = std::max<int64_t>(0, i + 1 - j0); j < n; ++j) s[j] = kNegInf;
    if (!mask.defined()) return;
    const int64_t base = offsets[static_cast<size_t>(b)] + i * row_stride + j0 * col_stride;
    if (mask.dtype() == DType::Bool) {
      const bool* m = mask.data<bool>() + base;
      for (int64_t j = 0; j < n; ++j)
        if (!m[j * col_stride]) s[j] = kNegInf;
    } else {
      const C* m = mask.data<C>() + base;
      for (int64_t j = 0; j < n; ++j) s[j] += m[j * col_stride];
    }
  }
};

// max(init, x[0..n)) with 8 independent lanes (no reassociation needed for max).
template <class C>
C row_max(const C* x, int64_t n, C init) {
  C lane[8] = {init, init, init, init, init, init, init, init};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int u = 0; u < 8; ++u) lane[u] = std::max(lane[u], x[j + u]);
  for (; j < n; ++j) lane[0] = std::max(lane[0], x[j]);
  for (int u = 1; u < 8; ++u) lane[0] = std::max(lane[0], lane[u]);
  return lane[0];
}

template <class C>
void exp_in_place(C* x, int64_t n) {
  simd::table<C>().unary[static_cast<int>(OpId::Exp)](x, x, n);
}

// The keys query block [i0, i0 + n) can see: [0, key_end).
int64_t key_end(const AttentionShape& s, bool causal, int64_t i0, int64_t n) {
  return causal ? std::min(s.S, i0 + n) : s.S;
}

template <class T>
T* lse_of(T* packed, const AttentionShape& s, int64_t b) {
  const int64_t rows = s.L + attention_lse_rows(s.L, s.Ev, dtype_of<T>());
  return packed + b * rows * s.Ev + s.L * s.Ev;
}

// ---- forward

template <class T>
void forward(const OpCall& call, const Tensor& out) {
  using C = compute_t<T>;
  const AttentionShape s = attention_shape(call);
  const Matrices<C> q(call.inputs[0], s.batch), k(call.inputs[1], s.batch),
      v(call.inputs[2], s.batch);
  const ScoreMask<C> mask(call, s);
  const C scale = static_cast<C>(call.scalars[0].to_double());
  const DType cd = dtype_of<C>();
  T* packed = out.data<T>();
  const int64_t blocks = (s.L + kQueryBlock - 1) / kQueryBlock;
  parallel_for(0, s.batch_count * blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<C> scores(kQueryBlock * kKeyBlock), acc(kQueryBlock * s.Ev), m(kQueryBlock),
        l(kQueryBlock), qs(kQueryBlock * s.E);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / blocks, i0 = (task % blocks) * kQueryBlock;
      const int64_t rows = std::min(kQueryBlock, s.L - i0);
      std::fill(acc.begin(), acc.end(), C(0));
      std::fill(m.begin(), m.end(), -std::numeric_limits<C>::infinity());
      std::fill(l.begin(), l.end(), C(0));
      // The query block times scale, once (instead of every score).
      for (int64_t r = 0; r < rows; ++r) {
        const C* src = q.at(b) + (i0 + r) * q.row_stride;
        for (int64_t e = 0; e < s.E; ++e) qs[r * s.E + e] = src[e] * scale;
      }
      const int64_t end = key_end(s, mask.causal, i0, rows);
      for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, end - j0);
        gemm(cd, GemmOperand{qs.data(), rows, s.E, s.E, 1}, k.rows_t(b, j0, cols, s.E),
             scores.data(), cols, false);
        for (int64_t r = 0; r < rows; ++r) {
          C* row = scores.data() + r * cols;
          mask.apply(b, i0 + r, j0, cols, C(1), row);
          const C mx = row_max(row, cols, m[r]);
          // All keys so far dropped: keep p = 0 (exp(-inf - -inf) would be NaN).
          const C shift = mx == -std::numeric_limits<C>::infinity() ? C(0) : mx;
          for (int64_t j = 0; j < cols; ++j) row[j] -= shift;
          exp_in_place(row, cols);
          C sum = 0;
          for (int64_t j = 0; j < cols; ++j) sum += row[j];
          const C alpha = m[r] == -std::numeric_limits<C>::infinity() ? C(0) : std::exp(m[r] - mx);
          l[r] = l[r] * alpha + sum;
          m[r] = mx;
          C* a = acc.data() + r * s.Ev;
          for (int64_t e = 0; e < s.Ev; ++e) a[e] *= alpha;
        }
        gemm(cd, GemmOperand{scores.data(), rows, cols, cols, 1}, v.rows(b, j0, cols, s.Ev),
             acc.data(), s.Ev, true);
      }
      T* o = packed + b * (s.L + attention_lse_rows(s.L, s.Ev, dtype_of<T>())) * s.Ev;
      T* lse = lse_of(packed, s, b);
      for (int64_t r = 0; r < rows; ++r) {
        // A row with every key dropped: 0 / 0 = NaN, as softmax over all -inf gives.
        const C inv = C(1) / l[r];
        for (int64_t e = 0; e < s.Ev; ++e)
          o[(i0 + r) * s.Ev + e] = to_element<T>(acc[r * s.Ev + e] * inv);
        const C value = m[r] + std::log(l[r]);
        std::memcpy(reinterpret_cast<char*>(lse) + (i0 + r) * sizeof(C), &value, sizeof(C));
      }
    }
  });
}

// ---- output: the first L rows of packed

template <class T>
void output(const OpCall& call, const Tensor& out) {
  const AttentionShape s = attention_shape(call);
  const Tensor& packed = call.inputs[0];
  const int64_t block = s.L * s.Ev;
  const int64_t stride = (s.L + attention_lse_rows(s.L, s.Ev, dtype_of<T>())) * s.Ev;
  const T* src = packed.data<T>();
  T* dst = out.data<T>();
  parallel_for(0, s.batch_count, std::max<int64_t>(1, 65536 / std::max<int64_t>(block, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t b = lo; b < hi; ++b)
                   std::memcpy(dst + b * block, src + b * stride, sizeof(T) * block);
               });
}

// ---- backward

template <class T>
void backward(const OpCall& call, const Tensor& out) {
  using C = compute_t<T>;
  const AttentionShape s = attention_shape(call);
  const Matrices<C> q(call.inputs[2], s.batch), k(call.inputs[3], s.batch),
      v(call.inputs[4], s.batch), dout(call.inputs[0], s.batch);
  const Tensor packed = call.inputs[1];
  const ScoreMask<C> mask(call, s);
  const C scale = static_cast<C>(call.scalars[0].to_double());
  const DType cd = dtype_of<C>();
  const int64_t width = std::max(s.E, s.Ev);
  const int64_t packed_rows = s.L + attention_lse_rows(s.L, s.Ev, dtype_of<T>());
  T* grads = out.data<T>();
  parallel_for(0, s.batch_count, 1, [&](int64_t lo, int64_t hi) {
    std::vector<C> dq(s.L * s.E), dk(kKeyBlock * s.E), dv(kKeyBlock * s.Ev), lse(s.L), d(s.L),
        p(kQueryBlock * kKeyBlock), dp(kQueryBlock * kKeyBlock);
    for (int64_t b = lo; b < hi; ++b) {
      const T* o = packed.data<T>() + b * packed_rows * s.Ev;
      const T* lse_src = lse_of(packed.data<T>(), s, b);
      std::memcpy(lse.data(), lse_src, sizeof(C) * s.L);
      const C* g = dout.at(b);
      for (int64_t i = 0; i < s.L; ++i) {
        C sum = 0;
        for (int64_t e = 0; e < s.Ev; ++e)
          sum += g[i * dout.row_stride + e] * static_cast<C>(o[i * s.Ev + e]);
        d[i] = sum;
      }
      std::fill(dq.begin(), dq.end(), C(0));
      for (int64_t j0 = 0; j0 < s.S; j0 += kKeyBlock) {
        const int64_t cols = std::min(kKeyBlock, s.S - j0);
        std::fill(dk.begin(), dk.end(), C(0));
        std::fill(dv.begin(), dv.end(), C(0));
        const int64_t first = mask.causal ? j0 / kQueryBlock * kQueryBlock : 0;
        for (int64_t i0 = first; i0 < s.L; i0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, s.L - i0);
          gemm(cd, q.rows(b, i0, rows, s.E), k.rows_t(b, j0, cols, s.E), p.data(), cols, false);
          for (int64_t r = 0; r < rows; ++r) {
            C* row = p.data() + r * cols;
            mask.apply(b, i0 + r, j0, cols, scale, row);
            for (int64_t j = 0; j < cols; ++j) row[j] -= lse[i0 + r];
            exp_in_place(row, cols);
          }
          const GemmOperand pm{p.data(), rows, cols, cols, 1};
          const GemmOperand pt{p.data(), cols, rows, 1, cols};
          gemm(cd, pt, dout.rows(b, i0, rows, s.Ev), dv.data(), s.Ev, true);
          gemm(cd, dout.rows(b, i0, rows, s.Ev), v.rows_t(b, j0, cols, s.Ev), dp.data(), cols,
               false);
          for (int64_t r = 0; r < rows; ++r) {
            C* pr = p.data() + r * cols;
            const C* dpr = dp.data() + r * cols;
            const C dr = d[i0 + r];
            for (int64_t j = 0; j < cols; ++j) pr[j] = pr[j] * (dpr[j] - dr) * scale;
          }
          // p now holds dS * scale.
          gemm(cd, pm, k.rows(b, j0, cols, s.E), dq.data() + i0 * s.E, s.E, true);
          gemm(cd, pt, q.rows(b, i0, rows, s.E), dk.data(), s.E, true);
        }
        T* base = grads + b * (s.L + 2 * s.S) * width;
        for (int64_t j = 0; j < cols; ++j) {
          for (int64_t e = 0; e < s.E; ++e)
            base[(s.L + j0 + j) * width + e] = to_element<T>(dk[j * s.E + e]);
          for (int64_t e = 0; e < s.Ev; ++e)
            base[(s.L + s.S + j0 + j) * width + e] = to_element<T>(dv[j * s.Ev + e]);
        }
      }
      T* base = grads + b * (s.L + 2 * s.S) * width;
      for (int64_t i = 0; i < s.L; ++i)
        for (int64_t e = 0; e < s.E; ++e) base[i * width + e] = to_element<T>(dq[i * s.E + e]);
      if (width > s.E || width > s.Ev) {  // the padding columns: zeros, never garbage
        for (int64_t r = 0; r < s.L + 2 * s.S; ++r) {
          const int64_t used = r < s.L + s.S ? s.E : s.Ev;
          for (int64_t e = used; e < width; ++e) base[r * width + e] = T(0.0f);
        }
      }
    }
  });
}

}  // namespace

void attention(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      switch (call.op) {
        case OpId::Attention:
          forward<T>(call, out);
          break;
        case OpId::AttentionOutput:
          output<T>(call, out);
          break;
        default:
          backward<T>(call, out);
      }
    }
  });
}

}  // namespace kiln::cpu
