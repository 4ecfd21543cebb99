// Stride arithmetic shared by the view shape rules and reshape().
#pragma once

#include "runtime/dims.h"

namespace kiln {

// Strides that let a tensor of (sizes, strides) be viewed with new_sizes without a copy
// (PyTorch's rule: each run of merged dims must be contiguous in memory). Returns false
// when no such strides exist. new_sizes must have the same element count.
bool compute_view_strides(const Dims& sizes, const Dims& strides, const Dims& new_sizes,
                          Dims* new_strides);

// Resolves a single -1 in sizes against numel; throws ShapeError naming op otherwise.
Dims infer_size(const Dims& sizes, int64_t numel, const char* op);

}  // namespace kiln
