// The backward rule of lstm_output (ops/lstm_layout.h): one fused lstm_backward call
// from the gradient of y (the output sequence, h_n's row and c_n's row together) and the
// saved packed forward, its flat result viewed as the gradients of xw, h0, c0 and w_hh.
// lstm_layer and lstm_backward have no rule of their own; packed gets no gradient.
#include "ops/autograd/rules.h"
#include "ops/dispatch.h"
#include "ops/lstm_layout.h"

namespace kiln::autograd {

uint32_t lstm_saved(const OpCall&, uint32_t) { return kAll; }

TensorList lstm_backward(const OpNode& node, const Tensor& grad) {
  const OpCall& c = node.call();
  OpCall call{OpId::LstmBackward,
              {grad, node.saved(0), node.saved(2), node.saved(3), node.saved(4)},
              {},
              c.attrs};
  const LstmShape s = lstm_shape(call);
  const Tensor grads = dispatch(call);
  const auto part = [&](int64_t offset, const Dims& sizes) {
    return grads.slice(0, offset, offset + dims_numel(sizes)).view(sizes);
  };
  TensorList out(c.inputs.size());
  out[1] = part(0, {s.T, s.B, 4 * s.H});
  out[2] = part(s.dh0_offset(), {s.B, s.H});
  out[3] = part(s.dc0_offset(), {s.B, s.H});
  out[4] = part(s.dw_offset(), {4 * s.H, s.H});
  return out;
}

}  // namespace kiln::autograd
