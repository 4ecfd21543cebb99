// CPU Cat: joins inputs along attrs.dim into out (the promoted dtype). Inputs with no
// elements contribute nothing. An input that is contiguous and already has out's
// dtype is copied as one block of bytes per outer index (memcpy, parallel over the
// outer index); any other input (strided, or needing conversion) is copied by the
// Cast kernel into the matching slice view of out.
#include <algorithm>
#include <cstring>

#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

// Copies rows bytes-blocks of src_row bytes each into dst rows dst_row bytes apart.
void copy_blocks(const char* src, int64_t rows, int64_t src_row, char* dst, int64_t dst_row) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(src_row, 1));
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      std::memcpy(dst + r * dst_row, src + r * src_row, static_cast<size_t>(src_row));
  });
}

}  // namespace

void cat(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  const int64_t dim = call.attrs.dim;
  const DimSplit split = split_at_dim(out.sizes(), dim);
  const int64_t element = out.element_size();
  int64_t position = 0;  // along dim, where the next input starts
  for (const Tensor& input : call.inputs) {
    if (input.numel() == 0) continue;
    const int64_t length = input.size(dim);
    if (input.is_contiguous() && input.dtype() == out.dtype() && out.is_contiguous()) {
      copy_blocks(static_cast<const char*>(input.data_ptr()), split.outer,
                  length * split.inner * element,
                  static_cast<char*>(out.data_ptr()) + position * split.inner * element,
                  split.size * split.inner * element);
    } else {
      const Tensor slice =
          Tensor::make_view(out.storage(), input.sizes(), out.strides(),
                            out.storage_offset() + position * out.stride(dim), out.dtype());
      copy_converted(input, slice);
    }
    position += length;
  }
}

}  // namespace kiln::cpu
