// The fused LSTM ops (ops/lstm_layout.h) have no CUDA kernel yet: their shape rule
// refuses CUDA inputs with a DeviceError before any kernel runs, and nn.LSTM composes its
// steps from other ops on CUDA. This entry keeps the dispatcher's family table whole.
#include "ops/kernels.h"
#include "runtime/error.h"

namespace kiln::cuda {

void lstm(const OpCall& call, const Tensor&) {
  throw DeviceError(detail::cat("[", call.name(), "] has no CUDA kernel (CPU only)"));
}

}  // namespace kiln::cuda
