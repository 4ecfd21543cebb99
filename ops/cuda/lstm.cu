// CUDA fused LSTM layer (layout and math: ops/lstm_layout.h; the CPU twin is
// ops/cpu/lstm.cpp). The gates start as one copy of xw; then per step one cuBLAS GEMM
// (gates_t += h_prev @ w_hh^T, ops/cuda/gemm.cuh) and one kernel, a thread per (batch
// row, hidden unit), that activates the unit's four gates in place with the eager
// kernels' functors (ops/pointwise_math.h) and writes c_t and h_t. Backward: per step in
// reverse time order one kernel for the pre-activation gradients dG_t and the recurrent
// dc, then dh_prev = dG_t @ w_hh as a GEMM; after the loop dw_hh = sum_t dG_t^T h_prev_t
// as two GEMMs, as on the CPU. Everything is enqueued on kiln's stream: capturable in a
// CUDA graph (a traced step replays the whole layer as graph nodes).
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm.cuh"
#include "ops/lstm_layout.h"
#include "ops/pointwise_math.h"

namespace kiln::cuda_impl {
namespace {

constexpr int kThreads = 256;

// One step forward. g: the step's [B, 4H] gates, pre-activation on entry, activated on
// exit; c_prev, c, h: [B, H]; c_last (or null): c written there as well (c_n).
template <class T>
__global__ void __launch_bounds__(kThreads)
    lstm_step_kernel(T* g, const T* c_prev, T* c, T* h, T* c_last, int64_t B, int64_t H) {
  const int64_t n = B * H;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    T* row = g + b * 4 * H;
    const pm::UnaryFn<OpId::Sigmoid> sigmoid{};
    const pm::UnaryFn<OpId::Tanh> tanh{};
    const T i = sigmoid(row[j]), f = sigmoid(row[H + j]);
    const T gg = tanh(row[2 * H + j]), o = sigmoid(row[3 * H + j]);
    row[j] = i;
    row[H + j] = f;
    row[2 * H + j] = gg;
    row[3 * H + j] = o;
    const T cv = f * c_prev[e] + i * gg;
    c[e] = cv;
    h[e] = o * tanh(cv);
    if (c_last) c_last[e] = cv;
  }
}

// One step backward: a (activated gates), c_t, c_prev, gy (grad of h_t) and the recurrent
// dh in; d (the pre-activation gradients dG_t) out, dc updated to dc_prev in place.
template <class T>
__global__ void __launch_bounds__(kThreads)
    lstm_step_backward_kernel(const T* a, const T* c, const T* c_prev, const T* gy, const T* dh,
                              T* dc, T* d, int64_t B, int64_t H) {
  const int64_t n = B * H;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const T* ab = a + b * 4 * H;
    T* db = d + b * 4 * H;
    const T i = ab[j], f = ab[H + j], g = ab[2 * H + j], o = ab[3 * H + j];
    const T tc = pm::UnaryFn<OpId::Tanh>{}(c[e]);
    const T dhj = gy[e] + dh[e];
    const T dcj = dc[e] + dhj * o * (T(1) - tc * tc);
    db[j] = dcj * g * i * (T(1) - i);
    db[H + j] = dcj * c_prev[e] * f * (T(1) - f);
    db[2 * H + j] = dcj * i * (T(1) - g * g);
    db[3 * H + j] = dhj * tc * o * (T(1) - o);
    dc[e] = dcj * f;
  }
}

MatrixArg rows_of(const void* p, int64_t cols) { return {p, cols, 1, 0}; }
// The transpose of a row-major matrix with `cols` columns at p.
MatrixArg transposed(const void* p, int64_t cols) { return {p, 1, cols, 0}; }

template <class T>
void forward(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  const LstmShape s = lstm_shape(call);
  const int64_t B = s.B, H = s.H, BH = s.B * s.H;
  const DType dt = out.dtype();
  const int device = out.device().index;
  const Tensor xw = packed(call.inputs[0], dt);
  const Tensor h0 = packed(call.inputs[1], dt);
  const Tensor c0 = packed(call.inputs[2], dt);
  const Tensor w = packed(call.inputs[3], dt);
  DeviceScope scope(device);
  const cudaStream_t stream = stream_of(device);
  const int grid = grid_for(BH, kThreads, 1, device);
  with_packed_out(out, dt, op, [&](const Tensor& o) {
    T* packed_p = static_cast<T*>(o.data_ptr());
    T* y = packed_p;
    T* cs = packed_p + s.c_offset();
    T* gates = packed_p + s.gates_offset();
    check(cudaMemcpyAsync(gates, xw.data_ptr(), sizeof(T) * s.T * B * 4 * H,
                          cudaMemcpyDeviceToDevice, stream),
          op, "cudaMemcpyAsync");
    const LstmTimeOrder order{s.T, call.attrs.reverse};
    const T* h_prev = static_cast<const T*>(h0.data_ptr());
    const T* c_prev = static_cast<const T*>(c0.data_ptr());
    for (int64_t k = 0; k < s.T; ++k) {
      const int64_t t = order.at(k);
      T* g = gates + t * B * 4 * H;
      gemm(dt, device, GemmShape{1, B, 4 * H, H}, rows_of(h_prev, H), transposed(w.data_ptr(), H),
           g, 4 * H, 0, true, op);
      T* c = cs + t * BH;
      T* h = y + t * BH;
      T* c_last = k + 1 == s.T ? y + s.T * BH : nullptr;
      lstm_step_kernel<T><<<grid, kThreads, 0, stream>>>(g, c_prev, c, h, c_last, B, H);
      cuda_context::check_last_launch(op);
      h_prev = h;
      c_prev = c;
    }
  });
}

template <class T>
void output(const OpCall& call, const Tensor& out) {
  const LstmShape s = lstm_shape(call);
  const Tensor packed_in = packed(call.inputs[0], out.dtype());
  const int device = out.device().index;
  DeviceScope scope(device);
  with_packed_out(out, out.dtype(), call.name(), [&](const Tensor& o) {
    check(cudaMemcpyAsync(o.data_ptr(), packed_in.data_ptr(), sizeof(T) * s.y_numel(),
                          cudaMemcpyDeviceToDevice, stream_of(device)),
          call.name(), "cudaMemcpyAsync");
  });
}

template <class T>
void backward(const OpCall& call, const Tensor& out) {
  const char* op = call.name();
  const LstmShape s = lstm_shape(call);
  const int64_t B = s.B, H = s.H, BH = s.B * s.H, G4 = 4 * s.H;
  const DType dt = out.dtype();
  const int device = out.device().index;
  const Tensor grad_y = packed(call.inputs[0], dt);
  const Tensor packed_in = packed(call.inputs[1], dt);
  const Tensor h0 = packed(call.inputs[2], dt);
  const Tensor c0 = packed(call.inputs[3], dt);
  const Tensor w = packed(call.inputs[4], dt);
  DeviceScope scope(device);
  const cudaStream_t stream = stream_of(device);
  const int grid = grid_for(BH, kThreads, 1, device);
  const T* pk = static_cast<const T*>(packed_in.data_ptr());
  const T* y = pk;
  const T* cs = pk + s.c_offset();
  const T* gates = pk + s.gates_offset();
  const T* gy = static_cast<const T*>(grad_y.data_ptr());
  with_packed_out(out, dt, op, [&](const Tensor& o) {
    T* grads = static_cast<T*>(o.data_ptr());
    T* dgates = grads;
    T* dh = grads + s.dh0_offset();  // the recurrent dh, dh0 at the end
    T* dc = grads + s.dc0_offset();  // the recurrent dc, dc0 at the end
    T* dw = grads + s.dw_offset();
    check(cudaMemsetAsync(dh, 0, sizeof(T) * BH, stream), op, "cudaMemsetAsync");
    check(cudaMemcpyAsync(dc, gy + s.T * BH, sizeof(T) * BH, cudaMemcpyDeviceToDevice, stream), op,
          "cudaMemcpyAsync");
    const LstmTimeOrder order{s.T, call.attrs.reverse};
    for (int64_t k = s.T - 1; k >= 0; --k) {
      const int64_t t = order.at(k), p = order.prev(t);
      const T* c_prev = p < 0 ? static_cast<const T*>(c0.data_ptr()) : cs + p * BH;
      T* d = dgates + t * B * G4;
      lstm_step_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
          gates + t * B * G4, cs + t * BH, c_prev, gy + t * BH, dh, dc, d, B, H);
      cuda_context::check_last_launch(op);
      // dh_prev = dG_t @ w_hh ([B, 4H] x [4H, H])
      gemm(dt, device, GemmShape{1, B, H, G4}, rows_of(d, G4), rows_of(w.data_ptr(), H), dh, H, 0,
           false, op);
    }
    // dw_hh = sum_t dG_t^T h_prev_t: the T - 1 steps whose h_prev is a row block of y (one
    // GEMM over their (T - 1) B rows; k = 0 writes zeros), then the first step taken,
    // whose h_prev is h0.
    const int64_t first = order.at(0);
    const int64_t rows = (s.T - 1) * B;
    const T* dg_rest = dgates + (call.attrs.reverse ? 0 : B * G4);
    const T* h_rest = y + (call.attrs.reverse ? BH : 0);
    gemm(dt, device, GemmShape{1, G4, H, rows}, transposed(dg_rest, G4), rows_of(h_rest, H), dw, H,
         0, false, op);
    gemm(dt, device, GemmShape{1, G4, H, B}, transposed(dgates + first * B * G4, G4),
         rows_of(h0.data_ptr(), H), dw, H, 0, true, op);
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void lstm(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const auto run = [&](auto tag) {
    using T = decltype(tag);
    switch (call.op) {
      case OpId::LstmLayer:
        cuda_impl::forward<T>(call, out);
        break;
      case OpId::LstmOutput:
        cuda_impl::output<T>(call, out);
        break;
      default:
        cuda_impl::backward<T>(call, out);
    }
  };
  if (out.dtype() == DType::Float64)
    run(double{});
  else
    run(float{});
}

}  // namespace kiln::cuda
