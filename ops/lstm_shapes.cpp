// The shape rule of the fused LSTM ops (ops/lstm_layout.h).
#include "ops/lstm_layout.h"
#include "runtime/error.h"

namespace kiln {
namespace {

void check_tensor(const OpCall& c, const Tensor& t, const char* arg, const Dims& sizes,
                  const Tensor& xw) {
  KILN_CHECK(t.sizes() == sizes, ShapeError, "[", c.name(), "] expected ", arg, " of shape ",
             dims_str(sizes), ", got ", dims_str(t.sizes()));
  KILN_CHECK(t.dtype() == xw.dtype(), DTypeError, "[", c.name(), "] expected ", arg, " of dtype ",
             dtype_name(xw.dtype()), " (xw's), got ", dtype_name(t.dtype()));
  KILN_CHECK(t.device() == xw.device(), DeviceError, "[", c.name(), "] expected ", arg, " on ",
             xw.device().str(), " (xw's device), got ", t.device().str());
}

}  // namespace

LstmShape lstm_shape(const OpCall& c) {
  const size_t hi = lstm_h0_index(c.op);
  const Tensor& h0 = c.inputs[hi];
  LstmShape s;
  s.B = h0.size(0);
  s.H = h0.size(1);
  // lstm_backward carries no xw: T comes from grad_y's T + 1 rows
  s.T = c.op == OpId::LstmBackward ? c.inputs[0].size(0) - 1 : c.inputs[hi - 1].size(0);
  return s;
}

OutputMeta infer_lstm(const OpCall& c) {
  const size_t hi = lstm_h0_index(c.op);
  KILN_CHECK(c.inputs.size() == hi + 3, ValueError, "[", c.name(), "] expected ", hi + 3,
             " tensor arguments, got ", c.inputs.size());
  KILN_CHECK(c.scalars.empty(), ValueError, "[", c.name(), "] expected no scalar arguments, got ",
             c.scalars.size());
  const Tensor& lead = c.op == OpId::LstmBackward ? c.inputs[0] : c.inputs[hi - 1];
  const char* lead_name = c.op == OpId::LstmBackward ? "grad_y" : "xw";
  KILN_CHECK(lead.dtype() == DType::Float32 || lead.dtype() == DType::Float64, DTypeError, "[",
             c.name(), "] expected ", lead_name, " of dtype float32 or float64, got ",
             dtype_name(lead.dtype()));
  const Tensor& h0 = c.inputs[hi];
  KILN_CHECK(h0.dim() == 2, ShapeError, "[", c.name(),
             "] expected h0 of shape [batch, hidden], got ", dims_str(h0.sizes()));
  const int64_t B = h0.size(0), H = h0.size(1);
  KILN_CHECK(H >= 1, ShapeError, "[", c.name(),
             "] expected a hidden size of at least 1, got h0 of shape ", dims_str(h0.sizes()));
  if (c.op == OpId::LstmBackward) {
    KILN_CHECK(lead.dim() == 3 && lead.size(0) >= 2 && lead.size(1) == B && lead.size(2) == H,
               ShapeError, "[", c.name(), "] expected grad_y of shape [T + 1, ", B, ", ", H,
               "] with T >= 1, got ", dims_str(lead.sizes()));
  } else {
    KILN_CHECK(lead.dim() == 3 && lead.size(0) >= 1, ShapeError, "[", c.name(),
               "] expected xw of shape [T, batch, 4 * hidden] with T >= 1, got ",
               dims_str(lead.sizes()));
    check_tensor(c, lead, "xw", Dims{lead.size(0), B, 4 * H}, lead);
  }
  check_tensor(c, h0, "h0", Dims{B, H}, lead);
  check_tensor(c, c.inputs[hi + 1], "c0", Dims{B, H}, lead);
  check_tensor(c, c.inputs[hi + 2], "w_hh", Dims{4 * H, H}, lead);
  const LstmShape s = lstm_shape(c);
  if (c.op != OpId::LstmLayer) {
    check_tensor(c, c.inputs[c.op == OpId::LstmOutput ? 0 : 1],
                 "packed (the lstm_layer op's result)", Dims{s.packed_numel()}, lead);
  }
  OutputMeta m;
  m.sizes = c.op == OpId::LstmLayer    ? Dims{s.packed_numel()}
            : c.op == OpId::LstmOutput ? Dims{s.T + 1, B, H}
                                       : Dims{s.grads_numel()};
  m.strides = contiguous_strides(m.sizes);
  m.dtype = lead.dtype();
  m.device = lead.device();
  return m;
}

}  // namespace kiln
