// The kiln::cuda kernels of ops/kernels.h when kiln is built without the CUDA toolkit:
// each throws DeviceError (the dispatcher only calls them for CUDA tensors, which such a
// build cannot make; runtime/no_cuda/no_cuda.cpp is the runtime's side).
#include "ops/api.h"
#include "ops/kernels.h"
#include "runtime/error.h"

namespace kiln::cuda {

#define KILN_NO_CUDA_KERNEL(fn)                                                        \
  void fn(const OpCall& call, const Tensor& out) {                                     \
    throw DeviceError(detail::cat("[", call.name(), "] kiln was built without CUDA")); \
  }
KILN_NO_CUDA_KERNEL(unary)
KILN_NO_CUDA_KERNEL(clamp)
KILN_NO_CUDA_KERNEL(binary)
KILN_NO_CUDA_KERNEL(where)
KILN_NO_CUDA_KERNEL(reduce)
KILN_NO_CUDA_KERNEL(softmax)
KILN_NO_CUDA_KERNEL(layer_norm)
KILN_NO_CUDA_KERNEL(attention)
KILN_NO_CUDA_KERNEL(lstm)
KILN_NO_CUDA_KERNEL(matmul)
KILN_NO_CUDA_KERNEL(linear)
KILN_NO_CUDA_KERNEL(conv2d)
KILN_NO_CUDA_KERNEL(pool2d)
KILN_NO_CUDA_KERNEL(unfold)
KILN_NO_CUDA_KERNEL(cat)
KILN_NO_CUDA_KERNEL(index_select)
KILN_NO_CUDA_KERNEL(gather)
KILN_NO_CUDA_KERNEL(scatter)
KILN_NO_CUDA_KERNEL(sort)
KILN_NO_CUDA_KERNEL(scan)
KILN_NO_CUDA_KERNEL(multinomial)
KILN_NO_CUDA_KERNEL(nonzero)
KILN_NO_CUDA_KERNEL(factory)
KILN_NO_CUDA_KERNEL(random)
#undef KILN_NO_CUDA_KERNEL

}  // namespace kiln::cuda

namespace kiln {
bool attention_cuda_supports(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return false;
}
bool attention_cuda_backward_supports(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return false;
}
void* write_random_state_kernel() { return nullptr; }
}  // namespace kiln
