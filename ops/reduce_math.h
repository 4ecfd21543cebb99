// The math of reductions whose accumulator is more than one number, written once for the
// CPU kernels (ops/cpu/reduce.cpp, in double) and the CUDA kernels (ops/cuda/reduce.cu,
// in compute_t): what ops/pointwise_math.h is for pointwise ops. Each is identity(),
// add(acc, v), combine(left, right) and finish(acc).
#pragma once

#include <limits>

#include "ops/pointwise_math.h"

namespace kiln::pm {

// logsumexp in one pass: the running maximum m and the sum s of exp(x - m), rescaled when
// m grows; finish is m + log(s), PyTorch's max-subtracted form. -inf elements add nothing
// (a row of them, or no element, gives -inf), a +inf gives +inf, and NaN wins.
template <class C>
struct LogSumExp {
  struct Acc {
    C max, sum;
  };
  static KILN_HD Acc identity() { return Acc{-std::numeric_limits<C>::infinity(), C(0)}; }
  static KILN_HD Acc add(Acc a, C v) { return combine(a, Acc{v, C(1)}); }
  static KILN_HD Acc combine(Acc a, Acc b) {
    if (a.max != a.max) return a;
    if (b.max != b.max) return b;
    if (a.max == b.max) return Acc{a.max, a.sum + b.sum};  // two infinities of one sign too
    if (a.max > b.max) return Acc{a.max, a.sum + b.sum * exp(b.max - a.max)};
    return Acc{b.max, b.sum + a.sum * exp(a.max - b.max)};
  }
  static KILN_HD C finish(Acc a) { return a.max + log(a.sum); }
};

}  // namespace kiln::pm
