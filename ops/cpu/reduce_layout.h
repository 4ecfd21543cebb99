// Reduction input layout: every reduction kernel reads its input as a contiguous block
// [outer, reduced, inner], where reduced spans the reduced dims and outer x inner, in
// row-major order, is exactly the order of out's elements. Inputs that cover their
// memory densely (contiguous, or permutations of contiguous such as transposes) are
// used in place when, in memory order, the reduced dims form one run (all dims, the
// innermost, the outermost or a middle run) and the kept dims keep their logical
// order; anything else (expanded or stepped views, interleaved reduced dims) is copied
// once with the kept dims first and the reduced dims last (inner = 1).
#pragma once

#include "runtime/tensor.h"

namespace kiln::cpu {

struct ReduceLayout {
  int64_t outer = 1, reduced = 1, inner = 1;
};

struct ReduceInput {
  Tensor data;  // same dtype as the input; its elements are dense from data_ptr()
  ReduceLayout layout;
};

// dims: the reduced dims, non-negative, sorted, unique. positions_matter: the reduced
// block must list elements in row-major order of the reduced dims (argmax's flat
// index), not just in some order. data may be x itself, read from data_ptr().
ReduceInput prepare_reduce_input(const Tensor& x, const Dims& dims, bool positions_matter);

}  // namespace kiln::cpu
