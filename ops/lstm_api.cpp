// lstm_layer (ops/api.h): the packed forward (lstm_layer, no history), then lstm_output,
// the differentiable step whose node saves packed and the inputs for lstm_backward.
#include "ops/api.h"
#include "ops/dispatch.h"
#include "ops/lstm_layout.h"

namespace kiln {

bool lstm_layer_supports(DType dtype, Device device) {
  return (device.is_cpu() || device.is_cuda()) &&
         (dtype == DType::Float32 || dtype == DType::Float64);
}

Tensor lstm_layer(const Tensor& xw, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                  bool reverse) {
  OpCall call{OpId::LstmLayer, {xw, h0, c0, w_hh}, {}, {}};
  call.attrs.reverse = reverse;
  const Tensor packed = dispatch(call);
  call.op = OpId::LstmOutput;
  call.inputs.insert(call.inputs.begin(), packed);
  return dispatch(call);
}

}  // namespace kiln
