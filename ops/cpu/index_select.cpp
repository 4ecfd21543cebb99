// CPU IndexSelect: out = x gathered along attrs.dim at the positions in index (1-D,
// int32 or int64, any stride). Every index is checked before anything is written:
// a negative or too large one throws kiln::IndexError ("[index_select] index 7 is out
// of range for dim 0 with size 5"), a data-dependent check that only the kernel can
// make. x is read as a contiguous [outer, size, inner] block (packed first when it is
// strided) and each selected [inner] run is one memcpy; parallel over the runs.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/error.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

std::vector<int64_t> checked_indices(const Tensor& index, int64_t dim, int64_t limit) {
  const int64_t count = index.numel();
  const int64_t stride = index.dim() == 0 ? 0 : index.stride(0);
  std::vector<int64_t> indices(static_cast<size_t>(count));
  visit_dtype(index.dtype(), [&](auto tag) {
    using I = decltype(tag);
    if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>) {
      const I* p = index.data<I>();
      for (int64_t j = 0; j < count; ++j)
        indices[static_cast<size_t>(j)] = static_cast<int64_t>(p[j * stride]);
    }
  });
  for (int64_t i : indices) {
    KILN_CHECK(i >= 0 && i < limit, IndexError, "[index_select] index ", i,
               " is out of range for dim ", dim, " with size ", limit);
  }
  return indices;
}

}  // namespace

void index_select(const OpCall& call, const Tensor& out) {
  const Tensor& x_in = call.inputs[0];
  const int64_t dim = call.attrs.dim;
  const DimSplit split = split_at_dim(x_in.sizes(), dim);  // a 0-dim x reads as size 1
  const std::vector<int64_t> indices = checked_indices(call.inputs[1], dim, split.size);
  if (out.numel() == 0) return;
  const Tensor x = kernel_contiguous(x_in);
  const int64_t count = static_cast<int64_t>(indices.size());
  const int64_t run_bytes = split.inner * x.element_size();
  with_output(out, x.dtype(), [&](const Tensor& dst) {
    const char* src = static_cast<const char*>(x.data_ptr());
    char* y = static_cast<char*>(dst.data_ptr());
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(run_bytes, 1));
    parallel_for(0, split.outer * count, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t o = task / count, j = task % count;
        const int64_t row = o * split.size + indices[static_cast<size_t>(j)];
        std::memcpy(y + task * run_bytes, src + row * run_bytes, static_cast<size_t>(run_bytes));
      }
    });
  });
}

}  // namespace kiln::cpu
