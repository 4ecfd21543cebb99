#include "runtime/dims.h"

#include <limits>

#include "runtime/error.h"

namespace kiln {

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

// Shapes whose element count overflows int64 reach these (a huge broadcast's output, say)
// before Tensor::make rejects them with OutOfMemoryError: the products saturate at
// INT64_MAX instead of overflowing (undefined behaviour).
int64_t dims_numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t v : d)
    if (__builtin_mul_overflow(n, v, &n)) n = std::numeric_limits<int64_t>::max();
  return n;  // a 0 after the saturation still gives 0
}

Dims contiguous_strides(const Dims& sizes) {
  Dims strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    if (__builtin_mul_overflow(s, sizes[i] > 0 ? sizes[i] : 1, &s))
      s = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op, const char* arg) {
  const int64_t r = rank == 0 ? 1 : rank;  // a 0-dim tensor accepts dim 0 and -1
  KILN_CHECK(dim >= -r && dim < r, IndexError, "[", op, "] ", arg, " ", dim,
             " is out of range: expected a dim in [", -r, ", ", r - 1, "] for a tensor of rank ",
             rank);
  return dim < 0 ? dim + r : dim;
}

Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, ShapeError, "[", op, "] shapes ", dims_str(a),
               " and ", dims_str(b), " cannot be broadcast: dim ", i, " has sizes ", da, " and ",
               db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace kiln
