// The view stride helpers of ops/view_rules.h.
#include "ops/view_rules.h"

#include "runtime/error.h"

namespace kiln {

Dims infer_size(const Dims& sizes, int64_t numel, const char* op) {
  Dims out = sizes;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      KILN_CHECK(infer_at < 0, ShapeError, "[", op, "] only one dimension can be -1, got ",
                 dims_str(sizes));
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(sizes[i] >= 0, ShapeError, "[", op, "] invalid size ", sizes[i], " in shape ",
                 dims_str(sizes));
      known *= sizes[i];
    }
  }
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, ShapeError, "[", op, "] shape ", dims_str(sizes),
               " is invalid for an input of ", numel, " elements");
    out[infer_at] = numel / known;
  } else {
    KILN_CHECK(known == numel, ShapeError, "[", op, "] shape ", dims_str(sizes),
               " is invalid for an input of ", numel, " elements");
  }
  return out;
}

bool compute_view_strides(const Dims& sizes, const Dims& strides, const Dims& new_sizes,
                          Dims* new_strides) {
  new_strides->assign(new_sizes.size(), 0);
  const int64_t numel = dims_numel(sizes);
  if (numel == 0 || sizes.empty()) {  // empty or 0-dim: any shape of that size views it
    *new_strides = contiguous_strides(new_sizes);
    return true;
  }
  // Walk the old dims from the back in chunks that are contiguous among themselves and
  // map each chunk onto the new dims with the same element count.
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        (*new_strides)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace kiln
