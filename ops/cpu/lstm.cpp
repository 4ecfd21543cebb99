// CPU fused LSTM layer (layout and math: ops/lstm_layout.h). One pass over time each
// way; per step one GEMM (the hidden projection) and the gate math in flat loops over the
// step's [B, 4H] rows with the SIMD sigmoid and tanh of ops/cpu/simd.h (the eager
// kernels' functors). Batch rows never mix, so the batch is split into blocks of rows,
// one per thread, each running the whole time loop: no synchronization between steps (a
// batch too small to split runs on one thread, its GEMMs split by ops/cpu/blas_gemm.h).
//
// Forward: gates_t = xw_t, += h_prev @ w_hh^T, activated in place; c_t and h_t written
// to packed. Backward: per step in reverse time order, with dh = grad_y_t + the
// recurrent dh and dc the recurrent dc (c_n's gradient at the start):
//   do = dh tanh(c_t), dc += dh o (1 - tanh(c_t)^2), di = dc g, df = dc c_prev,
//   dg = dc i, dc_prev = dc f; the pre-activation gradients dG_t (sigmoid' = s (1 - s),
//   tanh' = 1 - t^2); dh_prev = dG_t @ w_hh. After the loop dw_hh = sum_t dG_t^T h_prev_t
//   as two GEMMs (the steps whose h_prev is in y, then the one whose h_prev is h0).
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/blas_gemm.h"
#include "ops/cpu/kernel_io.h"
#include "ops/cpu/simd.h"
#include "ops/lstm_layout.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

// A row-major matrix operand of rows x cols at p (transposed: element (r, c) at
// p[c * cols_of_storage + r]).
GemmOperand rows_of(const void* p, int64_t rows, int64_t cols) { return {p, rows, cols, cols, 1}; }
GemmOperand transposed(const void* p, int64_t rows, int64_t cols) {
  return {p, rows, cols, 1, rows};
}

// Rows per block of the batch split: blocks of at least 4 rows, one per thread.
int64_t batch_grain(int64_t B) {
  const int64_t threads = num_threads();
  return std::max<int64_t>(4, (B + threads - 1) / threads);
}

template <class C>
void activate(C* g, int64_t B, int64_t H) {
  const auto& table = simd::table<C>();
  const auto sigmoid = table.unary[static_cast<int>(OpId::Sigmoid)];
  const auto tanh = table.unary[static_cast<int>(OpId::Tanh)];
  for (int64_t b = 0; b < B; ++b) {
    C* row = g + b * 4 * H;
    sigmoid(row, row, 2 * H);  // i, f
    tanh(row + 2 * H, row + 2 * H, H);
    sigmoid(row + 3 * H, row + 3 * H, H);
  }
}

template <class C>
void forward(const OpCall& call, const Tensor& out) {
  const LstmShape s = lstm_shape(call);
  const int64_t B = s.B, H = s.H, BH = s.B * s.H;
  const DType dt = dtype_of<C>();
  const Tensor xw = kernel_contiguous(call.inputs[0], dt);
  const Tensor h0 = kernel_contiguous(call.inputs[1], dt);
  const Tensor c0 = kernel_contiguous(call.inputs[2], dt);
  const Tensor w = kernel_contiguous(call.inputs[3], dt);
  C* packed = out.data<C>();
  C* y = packed;
  C* cs = packed + s.c_offset();
  C* gates = packed + s.gates_offset();
  const LstmTimeOrder order{s.T, call.attrs.reverse};
  const auto tanh = simd::table<C>().unary[static_cast<int>(OpId::Tanh)];
  // Batch rows never mix: each block of rows runs the whole time loop on its own.
  parallel_for(0, B, batch_grain(B), [&](int64_t b0, int64_t b1) {
    const int64_t rows = b1 - b0;
    std::vector<C> tc(static_cast<size_t>(rows * H));
    const C* h_prev = h0.data<C>() + b0 * H;
    const C* c_prev = c0.data<C>() + b0 * H;
    for (int64_t k = 0; k < s.T; ++k) {
      const int64_t t = order.at(k);
      C* g = gates + (t * B + b0) * 4 * H;
      std::memcpy(g, xw.data<C>() + (t * B + b0) * 4 * H, sizeof(C) * rows * 4 * H);
      gemm(dt, rows_of(h_prev, rows, H), transposed(w.data<C>(), H, 4 * H), g, 4 * H, true);
      activate(g, rows, H);
      C* c = cs + t * BH + b0 * H;
      C* h = y + t * BH + b0 * H;
      for (int64_t b = 0; b < rows; ++b) {
        const C* gi = g + b * 4 * H;
        const C *gf = gi + H, *gg = gi + 2 * H;
        const C* cp = c_prev + b * H;
        C* cb = c + b * H;
        for (int64_t j = 0; j < H; ++j) cb[j] = gf[j] * cp[j] + gi[j] * gg[j];
      }
      tanh(c, tc.data(), rows * H);
      for (int64_t b = 0; b < rows; ++b) {
        const C* go = g + b * 4 * H + 3 * H;
        const C* tb = tc.data() + b * H;
        C* hb = h + b * H;
        for (int64_t j = 0; j < H; ++j) hb[j] = go[j] * tb[j];
      }
      h_prev = h;
      c_prev = c;
    }
    std::memcpy(y + s.T * BH + b0 * H, c_prev, sizeof(C) * rows * H);  // c_n
  });
}

template <class C>
void output(const OpCall& call, const Tensor& out) {
  const LstmShape s = lstm_shape(call);
  const Tensor packed = kernel_contiguous(call.inputs[0], dtype_of<C>());
  std::memcpy(out.data<C>(), packed.data<C>(), sizeof(C) * s.y_numel());
}

template <class C>
void backward(const OpCall& call, const Tensor& out) {
  const LstmShape s = lstm_shape(call);
  const int64_t B = s.B, H = s.H, BH = s.B * s.H, G4 = 4 * s.H;
  const DType dt = dtype_of<C>();
  const Tensor grad_y = kernel_contiguous(call.inputs[0], dt);
  const Tensor packed_t = kernel_contiguous(call.inputs[1], dt);
  const Tensor h0 = kernel_contiguous(call.inputs[2], dt);
  const Tensor c0 = kernel_contiguous(call.inputs[3], dt);
  const Tensor w = kernel_contiguous(call.inputs[4], dt);
  const C* packed = packed_t.data<C>();
  const C* y = packed;
  const C* cs = packed + s.c_offset();
  const C* gates = packed + s.gates_offset();
  const C* gy = grad_y.data<C>();
  C* grads = out.data<C>();
  C* dgates = grads;
  C* dh = grads + s.dh0_offset();  // the recurrent dh, dh0 at the end
  C* dc = grads + s.dc0_offset();  // the recurrent dc, dc0 at the end
  C* dw = grads + s.dw_offset();
  const LstmTimeOrder order{s.T, call.attrs.reverse};
  const auto tanh = simd::table<C>().unary[static_cast<int>(OpId::Tanh)];
  std::memset(dh, 0, sizeof(C) * BH);
  std::memcpy(dc, gy + s.T * BH, sizeof(C) * BH);
  parallel_for(0, B, batch_grain(B), [&](int64_t b0, int64_t b1) {
    const int64_t rows = b1 - b0;
    std::vector<C> tc(static_cast<size_t>(rows * H));
    for (int64_t k = s.T - 1; k >= 0; --k) {
      const int64_t t = order.at(k), p = order.prev(t);
      const C* c_prev = (p < 0 ? c0.data<C>() : cs + p * BH) + b0 * H;
      tanh(cs + t * BH + b0 * H, tc.data(), rows * H);
      for (int64_t b = b0; b < b1; ++b) {
        const C* a = gates + (t * B + b) * G4;
        C* d = dgates + (t * B + b) * G4;
        const C* tb = tc.data() + (b - b0) * H;
        const C* cp = c_prev + (b - b0) * H;
        C* dhb = dh + b * H;
        C* dcb = dc + b * H;
        const C* gyb = gy + t * BH + b * H;
        for (int64_t j = 0; j < H; ++j) {
          const C i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
          const C dhj = gyb[j] + dhb[j];
          const C dcj = dcb[j] + dhj * o * (C(1) - tb[j] * tb[j]);
          d[j] = dcj * g * i * (C(1) - i);
          d[H + j] = dcj * cp[j] * f * (C(1) - f);
          d[2 * H + j] = dcj * i * (C(1) - g * g);
          d[3 * H + j] = dhj * tb[j] * o * (C(1) - o);
          dcb[j] = dcj * f;
        }
      }
      // dh_prev = dG_t @ w_hh ([rows, 4H] x [4H, H])
      gemm(dt, rows_of(dgates + (t * B + b0) * G4, rows, G4), rows_of(w.data<C>(), G4, H),
           dh + b0 * H, H, false);
    }
  });
  // dw_hh = sum_t dG_t^T h_prev_t: the T - 1 steps whose h_prev is a row block of y (one
  // GEMM over their (T - 1) B rows), then the first step taken, whose h_prev is h0.
  const int64_t first = order.at(0);
  const int64_t rows = (s.T - 1) * B;
  const C* dg_rest = dgates + (call.attrs.reverse ? 0 : B * G4);
  const C* h_rest = y + (call.attrs.reverse ? BH : 0);
  gemm(dt, transposed(dg_rest, G4, rows), rows_of(h_rest, rows, H), dw, H, false);
  gemm(dt, transposed(dgates + first * B * G4, G4, B), rows_of(h0.data<C>(), B, H), dw, H, true);
}

}  // namespace

void lstm(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const auto run = [&](auto tag) {
    using C = decltype(tag);
    switch (call.op) {
      case OpId::LstmLayer:
        forward<C>(call, out);
        break;
      case OpId::LstmOutput:
        output<C>(call, out);
        break;
      default:
        backward<C>(call, out);
    }
  };
  if (out.dtype() == DType::Float64)
    run(double{});
  else
    run(float{});
}

}  // namespace kiln::cpu
