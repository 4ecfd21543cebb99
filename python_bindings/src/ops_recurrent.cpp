// The fused LSTM layer (ops/lstm_layout.h): kiln.lstm_layer, nn.LSTM's path on the CPU
// (python_bindings/kiln/nn/modules/rnn.py), the raw rows lstm_output and lstm_backward,
// and lstm_layer_supports (whether the fused path runs for a tensor's dtype and device).
#include "common.h"
#include "ops/dispatch.h"

namespace kiln::python {
namespace {

// One raw row of the Recurrent family: its five tensors and the time direction.
Tensor raw_row(kiln::OpId op, kiln::TensorList inputs, bool reverse) {
  kiln::OpCall call{op, std::move(inputs), {}, {}};
  call.attrs.reverse = reverse;
  return kiln::dispatch(call);
}

}  // namespace

void register_recurrent_ops() {
  using T = const Tensor&;
  // fused LSTM layer (ops/lstm_layout.h): nn.LSTM's path (CPU and CUDA)
  bp::def(
      "lstm_layer",
      +[](T xw, T h0, T c0, T w_hh, bool reverse) {
        return kiln::lstm_layer(xw, h0, c0, w_hh, reverse);
      },
      (bp::arg("xw"), bp::arg("h0"), bp::arg("c0"), bp::arg("w_hh"), bp::arg("reverse") = false));
  // the raw rows (lstm_layer above is the API, the packed forward plus lstm_output)
  bp::def(
      "lstm_output",
      +[](T packed, T xw, T h0, T c0, T w_hh, bool reverse) {
        return raw_row(kiln::OpId::LstmOutput, {packed, xw, h0, c0, w_hh}, reverse);
      },
      (bp::arg("packed"), bp::arg("xw"), bp::arg("h0"), bp::arg("c0"), bp::arg("w_hh"),
       bp::arg("reverse") = false));
  bp::def(
      "lstm_backward",
      +[](T grad_y, T packed, T h0, T c0, T w_hh, bool reverse) {
        return raw_row(kiln::OpId::LstmBackward, {grad_y, packed, h0, c0, w_hh}, reverse);
      },
      (bp::arg("grad_y"), bp::arg("packed"), bp::arg("h0"), bp::arg("c0"), bp::arg("w_hh"),
       bp::arg("reverse") = false));
  bp::def(
      "lstm_layer_supports", +[](T x) { return kiln::lstm_layer_supports(x.dtype(), x.device()); },
      (bp::arg("input")));
}

}  // namespace kiln::python
