// cat(tensors, attrs.dim): each input is copied (converted to out's dtype, any strides)
// into its slice of out along dim: one strided copy per non-empty input.
#include "ops/cuda/common.cuh"

namespace kiln::cuda {

void cat(const OpCall& call, const Tensor& out) {
  const int64_t dim = call.attrs.dim;
  int64_t pos = 0;
  for (const Tensor& t : call.inputs) {
    const int64_t len = t.size(dim);
    if (t.numel() > 0) {
      Tensor slice = Tensor::make_view(out.storage(), t.sizes(), out.strides(),
                                       out.storage_offset() + pos * out.stride(dim), out.dtype());
      cuda_impl::copy_convert(t, slice, call.name());
    }
    pos += len;
  }
}

}  // namespace kiln::cuda
