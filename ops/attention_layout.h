// Fused attention (ops attention, attention_output, attention_backward): where each
// argument sits in a call, the shapes they must have and the layout of the tensors they
// pass to each other. Shared by the shape rule (ops/attention_shapes.cpp), the kernels
// (ops/cpu/attention.cpp, ops/cuda/attention.cu), the backward rule and ops/api.cpp.
//
//   q [B..., L, E], k [B..., S, E], v [B..., S, Ev], mask [B..., L, S] (bool: false
//   drops the key; floating, q's dtype: added to the scores). The batch dims B... are
//   the same for all (ops/api.cpp expands broadcast ones); last dims need not be
//   contiguous. scalars[0] = scale; attrs.causal drops key j > query i (top-left
//   aligned, as PyTorch). Dropout (CUDA only): scalars[1..3] = dropout_p, seed, offset;
//   element (b..., i, j) of the weights is kept where kiln.rand's value at its
//   row-major index in [B..., L, S] for that (seed, offset) is >= dropout_p, and scaled
//   by 1 / (1 - dropout_p); attention_backward takes the same scalars and redraws it.
//
//   attention        (q, k, v[, mask])                -> packed [B..., L + R, Ev]
//   attention_output (packed, q, k, v[, mask])        -> out    [B..., L, Ev]
//   attention_backward (grad, packed, q, k, v[, mask]) -> grads [B..., L + 2S, max(E, Ev)]
//                                        or, interleaved, grads [B, L, 3, H, E]
//
// packed: rows [0, L) hold the output, the R rows after them hold the logsumexp of each
// query's scaled scores (FlashAttention-2's saved statistic) as L values of LseT<T>
// (float, double for float64 inputs) written over the rows' bytes, then the dropout
// mask's M rows (attention_stores_mask, below). grads: rows [0, L)
// dq (first E columns), [L, L + S) dk (first E columns), [L + S, L + 2S) dv (first Ev).
// Interleaved (attention_grads_interleaved: the CUDA kernels, q [B, H, L, E] with S == L
// and Ev == E): grads[b, l, 0, h] is dq's row l of (b, h), [b, l, 1, h] dk's, [b, l, 2, h]
// dv's: the layout of a fused projection's output [B, L, 3 H E] split into q, k, v and
// viewed per head, so their gradients reach the projection without copies.
#pragma once

#include <cstdint>

#include "ops/registry.h"

namespace kiln {

// Index of q in a call of op (k and v follow it, then the optional mask).
inline size_t attention_q_index(OpId op) {
  return op == OpId::Attention ? 0 : op == OpId::AttentionOutput ? 1 : 2;
}

struct AttentionShape {
  Dims batch;  // B...
  int64_t batch_count = 1;
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  bool has_mask = false;
};
// The shape of a validated call.
AttentionShape attention_shape(const OpCall& call);

// Bytes of one logsumexp value for inputs of dtype d (float64: 8, else 4).
inline int64_t attention_lse_bytes(DType d) { return d == DType::Float64 ? 8 : 4; }
// R: the rows of Ev elements of dtype d that hold L logsumexp values.
inline int64_t attention_lse_rows(int64_t L, int64_t Ev, DType d) {
  const int64_t row_bytes = Ev * itemsize(d);
  return (L * attention_lse_bytes(d) + row_bytes - 1) / row_bytes;
}

// With dropout on CUDA (scalars[1..3] and a CUDA device), M more rows of packed after the
// logsumexp hold the forward's dropout mask as bits: query i's ceil(S / 32) uint32 words
// at word i * ceil(S / 32), bit j % 32 of word j / 32 set when key j is kept (words of
// key tiles the causal forward skips are left unwritten). The backward kernel reads them
// instead of drawing the mask again. M = 0 elsewhere.
inline bool attention_stores_mask(const OpCall& call) {
  return call.scalars.size() == 4 && call.inputs[attention_q_index(call.op)].device().is_cuda();
}
inline int64_t attention_mask_rows(int64_t L, int64_t S, int64_t Ev, DType d) {
  const int64_t row_bytes = Ev * itemsize(d);
  return (L * ((S + 31) / 32) * 4 + row_bytes - 1) / row_bytes;
}
// The rows of one batch entry of packed: L + R (+ M).
inline int64_t attention_packed_rows(const OpCall& call, int64_t L, int64_t S, int64_t Ev,
                                     DType d) {
  return L + attention_lse_rows(L, Ev, d) +
         (attention_stores_mask(call) ? attention_mask_rows(L, S, Ev, d) : 0);
}

// Whether attention_backward of these inputs writes the interleaved grads layout.
inline bool attention_grads_interleaved(const Tensor& q, const Tensor& k, const Tensor& v) {
  return q.device().is_cuda() && q.dim() == 4 && k.size(-2) == q.size(-2) &&
         v.size(-1) == q.size(-1);
}

// The shape rule of the Attention family (validates; names op, argument, expected vs
// actual).
OutputMeta infer_attention(const OpCall& call);

}  // namespace kiln
