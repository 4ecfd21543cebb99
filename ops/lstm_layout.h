// Fused LSTM layer (ops lstm_layer, lstm_output, lstm_backward): one direction of one
// nn.LSTM layer over a whole sequence, PyTorch's gate order (i, f, g, o) and math:
//
//   gates_t = xw_t + h_prev @ w_hh^T        (xw: the input projection with both biases,
//   i, f, o = sigmoid(.), g = tanh(.)        made by one linear over the sequence)
//   c_t = f * c_prev + i * g,   h_t = o * tanh(c_t)
//
// where prev is the step before t in time order (t - 1; t + 1 with attrs.reverse, the
// backward direction of a bidirectional layer). Shared by the shape rule
// (ops/lstm_shapes.cpp), the kernels (ops/cpu/lstm.cpp, ops/cuda/lstm.cu), the backward rule
// (ops/autograd/rules_lstm.cpp) and ops/lstm_api.cpp.
//
//   lstm_layer    (xw, h0, c0, w_hh)             -> packed [P]
//   lstm_output   (packed, xw, h0, c0, w_hh)     -> y      [T + 1, B, H]   (differentiable)
//   lstm_backward (grad_y, packed, h0, c0, w_hh) -> grads  [G]
//
// xw [T, B, 4H], h0 and c0 [B, H], w_hh [4H, H], one floating dtype (float32, float64),
// one device. y: rows [0, T) are h_t at each time position, row T is the last c (c_n):
// output, h_n and c_n are views of it. packed (1-D): y, then c_t per position [T, B, H],
// then the activated gates per position [T, B, 4H] (i, f, g, o after sigmoid / tanh).
// grads (1-D): dxw [T, B, 4H], dh0 [B, H], dc0 [B, H], dw_hh [4H, H].
#pragma once

#include <cstdint>

#include "ops/registry.h"

namespace kiln {

struct LstmShape {
  int64_t T = 0, B = 0, H = 0;

  int64_t y_numel() const { return (T + 1) * B * H; }
  int64_t c_offset() const { return y_numel(); }                   // in packed
  int64_t gates_offset() const { return c_offset() + T * B * H; }  // in packed
  int64_t packed_numel() const { return gates_offset() + T * B * 4 * H; }
  int64_t dh0_offset() const { return T * B * 4 * H; }  // in grads
  int64_t dc0_offset() const { return dh0_offset() + B * H; }
  int64_t dw_offset() const { return dc0_offset() + B * H; }
  int64_t grads_numel() const { return dw_offset() + 4 * H * H; }
};

// Time position of the k-th step taken, and of the step before it (-1: none, h0 / c0),
// for the kernels' loops over time.
struct LstmTimeOrder {
  int64_t T;
  bool reverse;
  int64_t at(int64_t k) const { return reverse ? T - 1 - k : k; }
  int64_t prev(int64_t t) const { return reverse ? (t + 1 < T ? t + 1 : -1) : t - 1; }
};

// Index of h0 in a call of op (c0 and w_hh follow it).
inline size_t lstm_h0_index(OpId op) { return op == OpId::LstmLayer ? 1 : 2; }

// The shape of a validated call.
LstmShape lstm_shape(const OpCall& call);

// The shape rule: every message names the op, the argument and expected vs actual.
OutputMeta infer_lstm(const OpCall& call);

}  // namespace kiln
