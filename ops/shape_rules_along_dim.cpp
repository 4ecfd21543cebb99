#include "ops/shape_rules_along_dim.h"

#include <algorithm>

#include "runtime/error.h"

namespace kiln {
namespace {

OutputMeta contiguous(Dims sizes, DType dtype, Device device) {
  OutputMeta m;
  m.strides = contiguous_strides(sizes);
  m.sizes = std::move(sizes);
  m.dtype = dtype;
  m.device = device;
  return m;
}

// A 0-dim tensor counts as one element along dim 0.
int64_t size_along(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.size(d); }

void check_counts(const OpCall& c, size_t inputs_lo, size_t inputs_hi, size_t scalars) {
  KILN_CHECK(c.inputs.size() >= inputs_lo && c.inputs.size() <= inputs_hi, ValueError, "[",
             c.name(), "] expected ", inputs_lo, inputs_lo == inputs_hi ? "" : " or more",
             " tensor arguments, got ", c.inputs.size());
  KILN_CHECK(c.scalars.size() == scalars, ValueError, "[", c.name(), "] expected ", scalars,
             " scalar arguments, got ", c.scalars.size());
}

void check_dim(const OpCall& c, const Tensor& x) {
  KILN_CHECK(c.attrs.dim >= 0 && c.attrs.dim < std::max<int64_t>(x.dim(), 1), IndexError, "[",
             c.name(), "] dim ", c.attrs.dim, " is out of range for a tensor of rank ", x.dim());
}

void check_index_dtype(const OpCall& c, const Tensor& index, bool allow_int32) {
  const bool ok = index.dtype() == DType::Int64 || (allow_int32 && index.dtype() == DType::Int32);
  KILN_CHECK(ok, DTypeError, "[", c.name(), "] expected index of dtype int64",
             allow_int32 ? " or int32" : "", ", got ", dtype_name(index.dtype()));
}

void check_same_rank(const OpCall& c, const Tensor& x, const Tensor& t, const char* arg) {
  KILN_CHECK(t.dim() == x.dim(), ShapeError, "[", c.name(), "] expected ", arg,
             " to have the input's rank ", x.dim(), ", got shape ", dims_str(t.sizes()),
             " for an input of shape ", dims_str(x.sizes()));
}

// index.size(d) <= t.size(d) for every d (except dim when skip_dim).
void check_index_fits(const OpCall& c, const Tensor& index, const Tensor& t, const char* arg,
                      bool skip_dim) {
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (skip_dim && d == c.attrs.dim) continue;
    KILN_CHECK(index.size(d) <= t.size(d), ShapeError, "[", c.name(), "] index of shape ",
               dims_str(index.sizes()), " is larger than ", arg, " of shape ", dims_str(t.sizes()),
               " in dim ", d, skip_dim ? " (any dim but dim)" : "");
  }
}

void check_same_dtype(const OpCall& c, const Tensor& x, const Tensor& src) {
  KILN_CHECK(src.dtype() == x.dtype(), DTypeError, "[", c.name(),
             "] expected src to have the input's dtype ", dtype_name(x.dtype()), ", got ",
             dtype_name(src.dtype()));
}

OutputMeta infer_gather(const OpCall& c) {
  check_counts(c, 2, 2, 0);
  const Tensor &x = c.inputs[0], &index = c.inputs[1];
  check_dim(c, x);
  check_index_dtype(c, index, false);
  check_same_rank(c, x, index, "index");
  check_index_fits(c, index, x, "input", true);
  return contiguous(index.sizes(), x.dtype(), x.device());
}

OutputMeta infer_scatter(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  if (c.op == OpId::Scatter && c.inputs.size() == 2) {
    check_counts(c, 2, 2, 1);  // the scalar form: scatter(x, dim, index, value)
  } else {
    check_counts(c, 3, 3, c.op == OpId::IndexAdd ? 1 : 0);
  }
  check_dim(c, x);
  const Tensor& index = c.inputs[1];
  if (c.op != OpId::Scatter) {
    KILN_CHECK(x.dtype() != DType::Bool, DTypeError, "[", c.name(),
               "] input of dtype bool is not supported (expected a numeric dtype)");
  }
  if (c.inputs.size() == 3) check_same_dtype(c, x, c.inputs[2]);
  if (c.op == OpId::IndexAdd) {
    check_index_dtype(c, index, true);
    KILN_CHECK(index.dim() <= 1, ShapeError, "[index_add] expected a 1-D index, got shape ",
               dims_str(index.sizes()));
    const Tensor& src = c.inputs[2];
    Dims want = x.sizes();
    if (x.dim() > 0) want[c.attrs.dim] = index.numel();
    KILN_CHECK(src.sizes() == want || (x.dim() == 0 && src.numel() == 1 && index.numel() == 1),
               ShapeError, "[index_add] expected source of shape ", dims_str(want),
               " (the input's shape with dim ", c.attrs.dim, " of the index's length ",
               index.numel(), "), got ", dims_str(src.sizes()));
    return contiguous(x.sizes(), x.dtype(), x.device());
  }
  check_index_dtype(c, index, false);
  check_same_rank(c, x, index, "index");
  check_index_fits(c, index, x, "input", true);
  if (c.inputs.size() == 3) {
    check_same_rank(c, x, c.inputs[2], "src");
    check_index_fits(c, index, c.inputs[2], "src", false);
  }
  return contiguous(x.sizes(), x.dtype(), x.device());
}

OutputMeta infer_sort(const OpCall& c) {
  check_counts(c, 1, 1, 0);
  const Tensor& x = c.inputs[0];
  check_dim(c, x);
  Dims sizes = x.sizes();
  if (c.op == OpId::Topk) {
    const int64_t n = size_along(x, c.attrs.dim);
    KILN_CHECK(c.attrs.count >= 0 && c.attrs.count <= n, Error, "[topk] k ", c.attrs.count,
               " is out of range for dim ", c.attrs.dim, " of size ", n,
               " (expected 0 <= k <= size)");
    if (x.dim() > 0) sizes[c.attrs.dim] = c.attrs.count;
  }
  return contiguous(std::move(sizes), DType::Int64, x.device());
}

OutputMeta infer_scan(const OpCall& c) {
  check_counts(c, 1, 1, 0);
  const Tensor& x = c.inputs[0];
  check_dim(c, x);
  const DType dtype = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  Dims sizes = x.sizes();
  if (c.op == OpId::Prod && x.dim() > 0) {
    if (c.attrs.keepdim)
      sizes[c.attrs.dim] = 1;
    else
      sizes.erase(sizes.begin() + c.attrs.dim);
  }
  return contiguous(std::move(sizes), dtype, x.device());
}

}  // namespace

OutputMeta infer_along_dim(const OpCall& c) {
  KILN_CHECK(!c.inputs.empty(), ValueError, "[", c.name(), "] expected a tensor argument");
  switch (c.info().family) {
    case OpFamily::Gather:
      return infer_gather(c);
    case OpFamily::Scatter:
      return infer_scatter(c);
    case OpFamily::Sort:
      return infer_sort(c);
    case OpFamily::Scan:
      return infer_scan(c);
    default:
      break;
  }
  throw Error(detail::cat("[", c.name(), "] is not an op along a dim"));
}

}  // namespace kiln
