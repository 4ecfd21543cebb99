#include "ops/shape_rules_sample.h"

#include "runtime/error.h"

namespace kiln {
namespace {

OutputMeta contiguous(Dims sizes, Device device) {
  OutputMeta m;
  m.strides = contiguous_strides(sizes);
  m.sizes = std::move(sizes);
  m.dtype = DType::Int64;
  m.device = device;
  return m;
}

}  // namespace

OutputMeta infer_multinomial(const OpCall& c) {
  KILN_CHECK(c.inputs.size() == 1 && c.scalars.size() == 2, ValueError,
             "[multinomial] expected one tensor (probs) and two scalars (seed, offset), got ",
             c.inputs.size(), " and ", c.scalars.size());
  const Tensor& p = c.inputs[0];
  KILN_CHECK(p.dim() == 1 || p.dim() == 2, ShapeError,
             "[multinomial] expected probs of rank 1 or 2, got shape ", dims_str(p.sizes()));
  KILN_CHECK(is_floating(p.dtype()), DTypeError,
             "[multinomial] expected probs to have a floating dtype, got ", dtype_name(p.dtype()));
  const int64_t categories = p.size(-1);
  KILN_CHECK(categories > 0, Error, "[multinomial] probs has no categories (shape ",
             dims_str(p.sizes()), ")");
  KILN_CHECK(c.attrs.count > 0, Error, "[multinomial] num_samples must be positive, got ",
             c.attrs.count);
  KILN_CHECK(c.attrs.replacement || c.attrs.count <= categories, Error,
             "[multinomial] cannot draw num_samples ", c.attrs.count, " without replacement from ",
             categories, " categories");
  Dims sizes = p.sizes();
  sizes.back() = c.attrs.count;
  return contiguous(std::move(sizes), p.device());
}

OutputMeta infer_nonzero(const OpCall& c) {
  KILN_CHECK(c.inputs.size() == 1, ValueError, "[nonzero] expected one tensor argument, got ",
             c.inputs.size());
  const Tensor& x = c.inputs[0];
  KILN_CHECK(c.attrs.count >= 0 && c.attrs.count <= x.numel(), ValueError, "[nonzero] count ",
             c.attrs.count, " is out of range for an input of ", x.numel(), " elements");
  return contiguous({c.attrs.count, x.dim()}, x.device());
}

}  // namespace kiln
