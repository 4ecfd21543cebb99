// Shape, dtype and device rules: one function per op family. These are the only place
// user input is validated; every message names the op in brackets, the argument and
// expected vs actual. Views compute their strides and offset here too.
#include <algorithm>

#include "ops/api.h"
#include "ops/attention_layout.h"
#include "ops/dispatch.h"
#include "ops/lstm_layout.h"
#include "ops/shape_rules_along_dim.h"
#include "ops/shape_rules_sample.h"
#include "ops/view_rules.h"
#include "runtime/cuda_context.h"
#include "runtime/error.h"

namespace kiln {
namespace {

using detail::cat;

void check_device_exists(Device device, const char* op) {
  if (device.is_cpu()) return;
  const int count = cuda_context::device_count();
  KILN_CHECK(device.index < count, DeviceError, "[", op, "] device ", device.str(),
             " is not available: ",
             count == 0 ? std::string("no CUDA GPU was found (kiln.cuda.is_available() is false)")
                        : cat("only ", count, " CUDA device(s) exist"));
}

void check_input_count(const OpCall& c, size_t lo, size_t hi) {
  KILN_CHECK(c.inputs.size() >= lo && c.inputs.size() <= hi, ValueError, "[", c.name(),
             "] expected ", lo == hi ? cat(lo) : cat(lo, " to ", hi), " tensor arguments, got ",
             c.inputs.size());
}

void check_scalar_count(const OpCall& c, size_t n) {
  KILN_CHECK(c.scalars.size() == n, ValueError, "[", c.name(), "] expected ", n,
             " scalar arguments, got ", c.scalars.size());
}

DType apply_rule(const OpCall& c, DType computed) {
  switch (c.info().dtype_rule) {
    case DTypeRule::Same:
    case DTypeRule::Promote:
      return computed;
    case DTypeRule::Float:
    case DTypeRule::PromoteFloat:
      return to_floating(computed);
    case DTypeRule::Bool:
      return DType::Bool;
    case DTypeRule::Int64:
      return DType::Int64;
    case DTypeRule::Attr:
      return c.attrs.dtype;
    case DTypeRule::Accumulate:
      return is_floating(computed) ? computed : DType::Int64;
  }
  return computed;
}

void reject_bool(const OpCall& c, DType d, const char* arg = "input") {
  KILN_CHECK(d != DType::Bool, DTypeError, "[", c.name(), "] ", arg,
             " of dtype bool is not supported (expected a numeric dtype)");
}

void require_floating(const OpCall& c, DType d, const char* arg) {
  KILN_CHECK(is_floating(d), DTypeError, "[", c.name(), "] expected ", arg,
             " to have a floating dtype (float16, bfloat16, float32, float64), got ",
             dtype_name(d));
}

OutputMeta contiguous_meta(const Dims& sizes, DType dtype, Device device) {
  OutputMeta m;
  m.sizes = sizes;
  m.strides = contiguous_strides(sizes);
  m.dtype = dtype;
  m.device = device;
  return m;
}

// ---- pointwise

OutputMeta infer_unary(const OpCall& c) {
  check_input_count(c, 1, 1);
  const Tensor& x = c.inputs[0];
  if (c.op != OpId::Cast) reject_bool(c, x.dtype());
  return contiguous_meta(x.sizes(), apply_rule(c, x.dtype()), x.device());
}

OutputMeta infer_clamp(const OpCall& c) {
  check_input_count(c, 1, 1);
  check_scalar_count(c, static_cast<size_t>(c.attrs.has_min) + c.attrs.has_max);
  KILN_CHECK(c.attrs.has_min || c.attrs.has_max, ValueError,
             "[clamp] at least one of min and max must be given");
  reject_bool(c, c.inputs[0].dtype());
  return contiguous_meta(c.inputs[0].sizes(), c.inputs[0].dtype(), c.inputs[0].device());
}

OutputMeta infer_binary(const OpCall& c) {
  DType computed;
  const Dims* sizes = nullptr;
  Dims broadcast;
  if (c.inputs.size() == 2) {
    check_scalar_count(c, 0);
    sizes = &c.inputs[0].sizes();
    computed = result_type(c.inputs[0], c.inputs[1]);
    const Dims& other = c.inputs[1].sizes();
    if (other != *sizes) {  // equal sizes (the common case) need no broadcast, no copy
      broadcast = broadcast_shapes(*sizes, other, c.name());
      sizes = &broadcast;
    }
  } else {
    check_input_count(c, 1, 1);
    check_scalar_count(c, 1);
    computed = result_type(c.inputs[0], c.scalars[0]);
    sizes = &c.inputs[0].sizes();
  }
  if (c.op == OpId::Sub && computed == DType::Bool) {
    throw DTypeError("[sub] subtracting bool tensors is not supported: use logical ops instead");
  }
  if (c.op == OpId::Pow && computed == DType::Bool) reject_bool(c, computed, "base");
  return contiguous_meta(*sizes, apply_rule(c, computed), c.inputs[0].device());
}

OutputMeta infer_where(const OpCall& c) {
  check_input_count(c, 3, 3);
  const Tensor &cond = c.inputs[0], &a = c.inputs[1], &b = c.inputs[2];
  KILN_CHECK(cond.dtype() == DType::Bool, DTypeError,
             "[where] expected condition to have dtype bool, got ", dtype_name(cond.dtype()));
  Dims sizes =
      broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  return contiguous_meta(std::move(sizes), result_type(a, b), cond.device());
}

// ---- reductions and normalization

OutputMeta infer_reduce(const OpCall& c) {
  check_input_count(c, 1, 1);
  const Tensor& x = c.inputs[0];
  const Dims& dims = c.attrs.dims;
  for (size_t i = 0; i < dims.size(); ++i) {
    KILN_CHECK(dims[i] >= 0 && dims[i] < std::max<int64_t>(x.dim(), 1), IndexError, "[", c.name(),
               "] dim ", dims[i], " is out of range for a tensor of rank ", x.dim());
    KILN_CHECK(i == 0 || dims[i] > dims[i - 1], ValueError, "[", c.name(), "] dims ",
               dims_str(dims), " must be sorted and unique (dim ", dims[i], " repeats)");
  }
  if (c.op != OpId::Sum && c.op != OpId::Mean) reject_bool(c, x.dtype());
  const bool flattened =
      c.op == OpId::Argmax && x.dim() > 1 && static_cast<int64_t>(dims.size()) == x.dim();
  KILN_CHECK(c.op != OpId::Argmax || dims.size() <= 1 || flattened, ValueError,
             "[argmax] expected one dim or none, got ", dims_str(dims));
  Dims sizes;
  int64_t reduced = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool r = std::binary_search(dims.begin(), dims.end(), d);
    if (r) reduced *= x.size(d);
    if (!r)
      sizes.push_back(x.size(d));
    else if (c.attrs.keepdim)
      sizes.push_back(1);
  }
  if (c.op == OpId::Max || c.op == OpId::Min || c.op == OpId::Argmax) {
    KILN_CHECK(reduced > 0, ShapeError, "[", c.name(), "] cannot reduce over a zero-size dim of ",
               "a tensor of shape ", dims_str(x.sizes()), ": the operation has no identity");
  }
  return contiguous_meta(std::move(sizes), apply_rule(c, x.dtype()), x.device());
}

OutputMeta infer_softmax(const OpCall& c) {
  check_input_count(c, 1, 1);
  const Tensor& x = c.inputs[0];
  wrap_dim(c.attrs.dim, x.dim(), c.name());
  reject_bool(c, x.dtype());
  return contiguous_meta(x.sizes(), apply_rule(c, x.dtype()), x.device());
}

OutputMeta infer_layer_norm(const OpCall& c) {
  check_input_count(c, 1, 3);
  check_scalar_count(c, 1);
  const Tensor& x = c.inputs[0];
  require_floating(c, x.dtype(), "input");
  const Dims& norm = c.attrs.dims;
  KILN_CHECK(!norm.empty() && static_cast<int64_t>(norm.size()) <= x.dim(), ShapeError,
             "[layer_norm] normalized_shape ", dims_str(norm),
             " must be non-empty and not longer than the input's rank ", x.dim());
  for (size_t i = 0; i < norm.size(); ++i) {
    const int64_t actual = x.size(x.dim() - static_cast<int64_t>(norm.size()) + i);
    KILN_CHECK(actual == norm[i], ShapeError, "[layer_norm] normalized_shape ", dims_str(norm),
               " does not match the last dims of the input of shape ", dims_str(x.sizes()));
  }
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const char* arg = i == 1 ? "weight" : "bias";
    KILN_CHECK(c.inputs[i].sizes() == norm, ShapeError, "[layer_norm] expected ", arg, " of shape ",
               dims_str(norm), ", got ", dims_str(c.inputs[i].sizes()));
    KILN_CHECK(c.inputs[i].dtype() == x.dtype(), DTypeError, "[layer_norm] expected ", arg,
               " to have the input's dtype ", dtype_name(x.dtype()), ", got ",
               dtype_name(c.inputs[i].dtype()));
  }
  return contiguous_meta(x.sizes(), x.dtype(), x.device());
}

// ---- linear algebra

void check_same_floating(const OpCall& c, const Tensor& a, const Tensor& b, const char* an,
                         const char* bn) {
  require_floating(c, a.dtype(), an);
  KILN_CHECK(a.dtype() == b.dtype(), DTypeError, "[", c.name(), "] expected ", an, " and ", bn,
             " to have the same dtype, got ", dtype_name(a.dtype()), " and ",
             dtype_name(b.dtype()));
}

OutputMeta infer_matmul(const OpCall& c) {
  check_input_count(c, 2, 2);
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError,
             "[matmul] both arguments need at least 1 dimension, got ", a.dim(), " and ", b.dim());
  check_same_floating(c, a, b, "a", "b");
  const int64_t k_a = a.size(-1);
  const int64_t k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  KILN_CHECK(k_a == k_b, ShapeError, "[matmul] shapes ", dims_str(a.sizes()), " and ",
             dims_str(b.sizes()), " cannot be multiplied (", k_a, " != ", k_b, ")");
  Dims sizes;
  if (a.dim() == 1 && b.dim() == 1) {
    // dot product: 0-dim
  } else if (b.dim() == 1) {
    sizes.assign(a.sizes().begin(), a.sizes().end() - 1);
  } else {
    Dims batch_a(a.sizes().begin(), a.sizes().end() - std::min<int64_t>(a.dim(), 2));
    Dims batch_b(b.sizes().begin(), b.sizes().end() - 2);
    sizes = broadcast_shapes(batch_a, batch_b, "matmul");
    if (a.dim() >= 2) sizes.push_back(a.size(-2));
    sizes.push_back(b.size(-1));
  }
  return contiguous_meta(std::move(sizes), a.dtype(), a.device());
}

OutputMeta infer_linear(const OpCall& c) {
  check_input_count(c, 2, 3);
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  KILN_CHECK(x.dim() >= 1, ShapeError, "[linear] input needs at least 1 dimension, got 0");
  KILN_CHECK(w.dim() == 2, ShapeError, "[linear] expected weight of rank 2 [out, in], got shape ",
             dims_str(w.sizes()));
  check_same_floating(c, x, w, "input", "weight");
  KILN_CHECK(x.size(-1) == w.size(1), ShapeError, "[linear] input of shape ", dims_str(x.sizes()),
             " has ", x.size(-1), " features but weight of shape ", dims_str(w.sizes()),
             " expects ", w.size(1));
  if (c.inputs.size() == 3) {
    const Tensor& bias = c.inputs[2];
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), ShapeError,
               "[linear] expected bias of shape [", w.size(0), "], got ", dims_str(bias.sizes()));
    check_same_floating(c, x, bias, "input", "bias");
  }
  Dims sizes = x.sizes();
  sizes.back() = w.size(0);
  return contiguous_meta(std::move(sizes), x.dtype(), x.device());
}

int64_t pooled_size(const OpCall& c, int64_t in, int i) {
  const int64_t k = c.attrs.kernel[i], s = c.attrs.stride[i], p = c.attrs.padding[i];
  KILN_CHECK(k > 0 && s > 0 && p >= 0, ValueError, "[", c.name(),
             "] expected kernel > 0, stride > 0 and padding >= 0, got kernel ", k, ", stride ", s,
             ", padding ", p);
  KILN_CHECK(in > 0, ShapeError, "[", c.name(), "] expected non-empty spatial dims, got size 0 in ",
             i == 0 ? "height" : "width", " (padding cannot make up an empty input)");
  const int64_t out = (in + 2 * p - k) / s + 1;
  KILN_CHECK(in + 2 * p >= k && out > 0, ShapeError, "[", c.name(), "] input size ", in,
             " (padded by ", p, " on each side) is smaller than the kernel size ", k);
  return out;
}

OutputMeta infer_conv2d(const OpCall& c) {
  check_input_count(c, 2, 3);
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError,
             "[conv2d] expected input of rank 3 [C, H, W] or 4 [N, C, H, W], got shape ",
             dims_str(x.sizes()));
  KILN_CHECK(w.dim() == 4, ShapeError, "[conv2d] expected weight of rank 4 [O, C, kH, kW], got ",
             dims_str(w.sizes()));
  check_same_floating(c, x, w, "input", "weight");
  const int64_t channels = x.size(-3);
  KILN_CHECK(w.size(1) == channels, ShapeError, "[conv2d] input of shape ", dims_str(x.sizes()),
             " has ", channels, " channels but weight of shape ", dims_str(w.sizes()), " expects ",
             w.size(1));
  if (c.inputs.size() == 3) {
    KILN_CHECK(c.inputs[2].dim() == 1 && c.inputs[2].size(0) == w.size(0), ShapeError,
               "[conv2d] expected bias of shape [", w.size(0), "], got ",
               dims_str(c.inputs[2].sizes()));
    check_same_floating(c, x, c.inputs[2], "input", "bias");
  }
  OpCall pool = c;  // reuse pooled_size with the weight's kernel
  pool.attrs.kernel[0] = w.size(2);
  pool.attrs.kernel[1] = w.size(3);
  Dims sizes = x.sizes();
  sizes[sizes.size() - 3] = w.size(0);
  sizes[sizes.size() - 2] = pooled_size(pool, x.size(-2), 0);
  sizes[sizes.size() - 1] = pooled_size(pool, x.size(-1), 1);
  return contiguous_meta(std::move(sizes), x.dtype(), x.device());
}

OutputMeta infer_pool2d(const OpCall& c) {
  const bool backward = c.op == OpId::MaxPool2dBackward;
  check_input_count(c, backward ? 2 : 1, backward ? 2 : 1);
  const Tensor& x = c.inputs[backward ? 1 : 0];
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, "[", c.name(),
             "] expected input of rank 3 [C, H, W] or 4 [N, C, H, W], got shape ",
             dims_str(x.sizes()));
  require_floating(c, x.dtype(), "input");
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(c.attrs.padding[i] * 2 <= c.attrs.kernel[i], ValueError, "[", c.name(), "] padding ",
               c.attrs.padding[i], " should be at most half the kernel size ", c.attrs.kernel[i]);
  }
  Dims sizes = x.sizes();
  sizes[sizes.size() - 2] = pooled_size(c, x.size(-2), 0);
  sizes[sizes.size() - 1] = pooled_size(c, x.size(-1), 1);
  if (backward) {  // grad has the pooled shape; dx has x's
    const Tensor& grad = c.inputs[0];
    KILN_CHECK(grad.sizes() == sizes, ShapeError, "[", c.name(), "] expected grad of shape ",
               dims_str(sizes), " (the pooled input ", dims_str(x.sizes()), "), got ",
               dims_str(grad.sizes()));
    KILN_CHECK(grad.dtype() == x.dtype() && grad.device() == x.device(), ValueError, "[", c.name(),
               "] expected grad and input of one dtype and device, got ", dtype_name(grad.dtype()),
               " on ", grad.device().str(), " and ", dtype_name(x.dtype()), " on ",
               x.device().str());
    return contiguous_meta(x.sizes(), x.dtype(), x.device());
  }
  return contiguous_meta(std::move(sizes), x.dtype(), x.device());
}

// Im2Col: x [N, C, H, W] -> [N, C*kH*kW, oH*oW]. Col2Im: the reverse map onto
// [N, C, H, W] with attrs.dims = {H, W}, summing where patches overlap.
OutputMeta infer_unfold(const OpCall& c) {
  check_input_count(c, 1, 1);
  const Tensor& x = c.inputs[0];
  require_floating(c, x.dtype(), "input");
  const int64_t kk = c.attrs.kernel[0] * c.attrs.kernel[1];
  if (c.op == OpId::Im2Col) {
    KILN_CHECK(x.dim() == 4, ShapeError,
               "[im2col] expected input of rank 4 [N, C, H, W], got shape ", dims_str(x.sizes()));
    const int64_t oh = pooled_size(c, x.size(2), 0), ow = pooled_size(c, x.size(3), 1);
    return contiguous_meta({x.size(0), x.size(1) * kk, oh * ow}, x.dtype(), x.device());
  }
  KILN_CHECK(c.attrs.dims.size() == 2, ValueError, "[col2im] expected output_size {H, W}, got ",
             dims_str(c.attrs.dims));
  KILN_CHECK(x.dim() == 3, ShapeError,
             "[col2im] expected input of rank 3 [N, C*kH*kW, L], got shape ", dims_str(x.sizes()));
  const int64_t oh = pooled_size(c, c.attrs.dims[0], 0), ow = pooled_size(c, c.attrs.dims[1], 1);
  KILN_CHECK(kk > 0 && x.size(1) % kk == 0 && x.size(2) == oh * ow, ShapeError,
             "[col2im] input of shape ", dims_str(x.sizes()), " does not match kernel ",
             c.attrs.kernel[0], "x", c.attrs.kernel[1], " patches of a ", c.attrs.dims[0], "x",
             c.attrs.dims[1], " image (expected [N, C*", kk, ", ", oh * ow, "])");
  return contiguous_meta({x.size(0), x.size(1) / kk, c.attrs.dims[0], c.attrs.dims[1]}, x.dtype(),
                         x.device());
}

// ---- data movement

OutputMeta infer_cat(const OpCall& c) {
  KILN_CHECK(!c.inputs.empty(), ValueError, "[cat] expected a non-empty list of tensors");
  const Tensor& first = c.inputs[0];
  KILN_CHECK(first.dim() > 0, ShapeError,
             "[cat] zero-dimensional tensor (input 0) cannot be "
             "concatenated");
  const int64_t dim = c.attrs.dim;
  KILN_CHECK(dim >= 0 && dim < first.dim(), IndexError, "[cat] dim ", dim,
             " is out of range for tensors of rank ", first.dim());
  Dims sizes = first.sizes();
  DType dtype = first.dtype();
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const Tensor& t = c.inputs[i];
    KILN_CHECK(t.dim() == first.dim(), ShapeError, "[cat] expected all tensors to have rank ",
               first.dim(), ", but input ", i, " has shape ", dims_str(t.sizes()));
    for (int64_t d = 0; d < t.dim(); ++d) {
      KILN_CHECK(d == dim || t.size(d) == first.size(d), ShapeError,
                 "[cat] sizes must match except in dim ", dim, ": input 0 has shape ",
                 dims_str(first.sizes()), ", input ", i, " has shape ", dims_str(t.sizes()));
    }
    sizes[dim] += t.size(dim);
    dtype = promote_types(dtype, t.dtype());
  }
  return contiguous_meta(std::move(sizes), dtype, first.device());
}

OutputMeta infer_index_select(const OpCall& c) {
  check_input_count(c, 2, 2);
  const Tensor &x = c.inputs[0], &index = c.inputs[1];
  KILN_CHECK(index.dtype() == DType::Int32 || index.dtype() == DType::Int64, DTypeError,
             "[index_select] expected index of dtype int32 or int64, got ",
             dtype_name(index.dtype()));
  KILN_CHECK(index.dim() <= 1, ShapeError, "[index_select] expected a 1-D index, got shape ",
             dims_str(index.sizes()));
  const int64_t dim = wrap_dim(c.attrs.dim, x.dim(), "index_select");
  Dims sizes = x.sizes();
  if (x.dim() == 0) {
    // The result of a 0-dim input is 0-dim: one element, so exactly one index picks it.
    KILN_CHECK(index.numel() == 1, ShapeError,
               "[index_select] a 0-dim input takes exactly one index, got ", index.numel());
  } else {
    sizes[dim] = index.numel();
  }
  return contiguous_meta(std::move(sizes), x.dtype(), x.device());
}

OutputMeta infer_to_device(const OpCall& c) {
  check_input_count(c, 1, 1);
  check_device_exists(c.attrs.device, "to");
  return contiguous_meta(c.inputs[0].sizes(), c.inputs[0].dtype(), c.attrs.device);
}

void check_sizes(const OpCall& c) {
  int64_t numel = 1;
  for (int64_t s : c.attrs.dims) {
    KILN_CHECK(s >= 0, ShapeError, "[", c.name(), "] sizes must be non-negative, got ",
               dims_str(c.attrs.dims));
    KILN_CHECK(!__builtin_mul_overflow(numel, s, &numel), ShapeError, "[", c.name(), "] the shape ",
               dims_str(c.attrs.dims), " has too many elements (over 2^63)");
  }
}

OutputMeta infer_factory(const OpCall& c) {
  check_input_count(c, 0, 0);
  check_sizes(c);
  check_device_exists(c.attrs.device, c.name());
  if (c.op == OpId::Full) check_scalar_count(c, 1);
  if (c.op == OpId::Arange) {
    check_scalar_count(c, 3);
    const double start = c.scalars[0].to_double(), end = c.scalars[1].to_double(),
                 step = c.scalars[2].to_double();
    KILN_CHECK(step != 0, ValueError, "[arange] step must be non-zero");
    KILN_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), ValueError,
               "[arange] upper bound ", c.scalars[1].str(), " and step ", c.scalars[2].str(),
               " have inconsistent signs for start ", c.scalars[0].str());
    reject_bool(c, c.attrs.dtype, "dtype");
  }
  return contiguous_meta(c.attrs.dims, c.attrs.dtype, c.attrs.device);
}

OutputMeta infer_random(const OpCall& c) {
  check_input_count(c, 0, 0);
  check_scalar_count(c, 2);
  check_sizes(c);
  check_device_exists(c.attrs.device, c.name());
  require_floating(c, c.attrs.dtype, "dtype");
  return contiguous_meta(c.attrs.dims, c.attrs.dtype, c.attrs.device);
}

// ---- views

OutputMeta view_meta(const Tensor& x, Dims sizes, Dims strides, int64_t offset) {
  OutputMeta m;
  m.sizes = std::move(sizes);
  m.strides = std::move(strides);
  m.offset = offset;
  m.dtype = x.dtype();
  m.device = x.device();
  return m;
}

OutputMeta infer_view(const OpCall& c) {
  check_input_count(c, 1, 1);
  const Tensor& x = c.inputs[0];
  const int64_t rank = x.dim();
  switch (c.op) {
    case OpId::View: {
      Dims sizes = infer_size(c.attrs.dims, x.numel(), "view");
      Dims strides;
      KILN_CHECK(compute_view_strides(x.sizes(), x.strides(), sizes, &strides), ShapeError,
                 "[view] cannot view a tensor of shape ", dims_str(x.sizes()), " and strides ",
                 dims_str(x.strides()), " as ", dims_str(sizes),
                 ": the new shape spans non-contiguous memory; use reshape() instead");
      return view_meta(x, std::move(sizes), std::move(strides), x.storage_offset());
    }
    case OpId::Permute: {
      const Dims& order = c.attrs.dims;
      KILN_CHECK(static_cast<int64_t>(order.size()) == rank, ShapeError, "[permute] expected ",
                 rank, " dims for a tensor of shape ", dims_str(x.sizes()), ", got ",
                 dims_str(order));
      Dims sizes(rank), strides(rank);
      std::vector<bool> seen(rank, false);
      for (int64_t i = 0; i < rank; ++i) {
        const int64_t d = wrap_dim(order[i], rank, "permute");
        KILN_CHECK(!seen[d], ValueError, "[permute] dims ", dims_str(order),
                   " is not a permutation: dim ", d, " repeats");
        seen[d] = true;
        sizes[i] = x.size(d);
        strides[i] = x.stride(d);
      }
      return view_meta(x, std::move(sizes), std::move(strides), x.storage_offset());
    }
    case OpId::Slice: {
      KILN_CHECK(rank > 0, IndexError, "[slice] cannot slice a 0-dim tensor");
      const int64_t d = wrap_dim(c.attrs.dim, rank, "slice");
      KILN_CHECK(c.attrs.step > 0, ValueError, "[slice] step must be positive, got ", c.attrs.step);
      const int64_t n = x.size(d);
      int64_t start = c.attrs.start < 0 ? c.attrs.start + n : c.attrs.start;
      int64_t end = c.attrs.end < 0 ? c.attrs.end + n : c.attrs.end;
      start = std::clamp<int64_t>(start, 0, n);
      end = std::clamp<int64_t>(end, start, n);
      Dims sizes = x.sizes(), strides = x.strides();
      sizes[d] = (end - start + c.attrs.step - 1) / c.attrs.step;
      strides[d] *= c.attrs.step;
      return view_meta(x, std::move(sizes), std::move(strides),
                       x.storage_offset() + start * x.stride(d));
    }
    case OpId::Select: {
      KILN_CHECK(rank > 0, IndexError, "[select] cannot index a 0-dim tensor");
      const int64_t d = wrap_dim(c.attrs.dim, rank, "select");
      const int64_t n = x.size(d);
      KILN_CHECK(c.attrs.start >= -n && c.attrs.start < n, IndexError, "[select] index ",
                 c.attrs.start, " is out of range for dim ", d, " with size ", n);
      const int64_t index = c.attrs.start < 0 ? c.attrs.start + n : c.attrs.start;
      Dims sizes = x.sizes(), strides = x.strides();
      sizes.erase(sizes.begin() + d);
      strides.erase(strides.begin() + d);
      return view_meta(x, std::move(sizes), std::move(strides),
                       x.storage_offset() + index * x.stride(d));
    }
    case OpId::Expand: {
      const Dims& target = c.attrs.dims;
      const int64_t n = static_cast<int64_t>(target.size());
      KILN_CHECK(n >= rank, ShapeError, "[expand] the number of sizes ", n,
                 " must be at least the tensor's rank ", rank, " (target ", dims_str(target),
                 ", tensor ", dims_str(x.sizes()), ")");
      Dims sizes(n), strides(n);
      for (int64_t i = n - 1; i >= 0; --i) {
        const int64_t j = i - (n - rank);
        if (j < 0) {
          KILN_CHECK(target[i] >= 0, ShapeError,
                     "[expand] size -1 is not allowed for a new "
                     "leading dim (target ",
                     dims_str(target), ")");
          sizes[i] = target[i];
          strides[i] = 0;
          continue;
        }
        const int64_t have = x.size(j);
        const int64_t want = target[i] == -1 ? have : target[i];
        KILN_CHECK(want == have || have == 1, ShapeError, "[expand] the expanded size ", want,
                   " must match the existing size ", have, " at dim ", i, " (target ",
                   dims_str(target), ", tensor ", dims_str(x.sizes()), ")");
        sizes[i] = want;
        strides[i] = want == have ? x.stride(j) : 0;
      }
      int64_t numel = 1;
      const bool empty = std::find(sizes.begin(), sizes.end(), 0) != sizes.end();
      for (int64_t s : sizes)
        KILN_CHECK(empty || !__builtin_mul_overflow(numel, s, &numel), ShapeError,
                   "[expand] the shape ", dims_str(sizes), " has too many elements (over 2^63)");
      return view_meta(x, std::move(sizes), std::move(strides), x.storage_offset());
    }
    case OpId::Squeeze: {
      Dims sizes, strides;
      for (int64_t d = 0; d < rank; ++d) {
        const bool named =
            c.attrs.dims.empty() ||
            std::find(c.attrs.dims.begin(), c.attrs.dims.end(), d) != c.attrs.dims.end();
        if (named && x.size(d) == 1) continue;
        sizes.push_back(x.size(d));
        strides.push_back(x.stride(d));
      }
      for (int64_t d : c.attrs.dims) wrap_dim(d, rank, "squeeze");
      return view_meta(x, std::move(sizes), std::move(strides), x.storage_offset());
    }
    case OpId::Unsqueeze: {
      const int64_t d = wrap_dim(c.attrs.dim, rank + 1, "unsqueeze");
      Dims sizes = x.sizes(), strides = x.strides();
      const int64_t stride = d < rank ? x.size(d) * x.stride(d) : 1;
      sizes.insert(sizes.begin() + d, 1);
      strides.insert(strides.begin() + d, stride);
      return view_meta(x, std::move(sizes), std::move(strides), x.storage_offset());
    }
    default:
      break;
  }
  throw Error(cat("[", c.name(), "] is not a view op"));
}

void check_inputs(const OpCall& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    KILN_CHECK(c.inputs[i].defined(), ValueError, "[", c.name(), "] tensor argument ", i,
               " is undefined");
    // A value a failed replay owed (lazy, never to come): an error, not a null read.
    const TensorImpl* t = c.inputs[i].impl();
    if (!t->storage && t->pending && t->pending->failure())
      lazy::throw_unavailable(detail::cat("[", c.name(), "] tensor argument ", i).c_str(),
                              t->pending.get());
  }
  if (c.info().family == OpFamily::ToDevice) return;
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    KILN_CHECK(c.inputs[i].device() == c.inputs[0].device(), DeviceError, "[", c.name(),
               "] expected all tensors on the same device, but argument 0 is on ",
               c.inputs[0].device().str(), " and argument ", i, " is on ",
               c.inputs[i].device().str());
  }
}

}  // namespace

OutputMeta infer_output(const OpCall& c) {
  check_inputs(c);
  switch (c.info().family) {
    case OpFamily::Unary:
      return infer_unary(c);
    case OpFamily::Clamp:
      return infer_clamp(c);
    case OpFamily::Binary:
      return infer_binary(c);
    case OpFamily::Where:
      return infer_where(c);
    case OpFamily::Reduce:
      return infer_reduce(c);
    case OpFamily::Softmax:
      return infer_softmax(c);
    case OpFamily::LayerNorm:
      return infer_layer_norm(c);
    case OpFamily::Attention:
      return infer_attention(c);
    case OpFamily::Recurrent:
      return infer_lstm(c);
    case OpFamily::Matmul:
      return infer_matmul(c);
    case OpFamily::Linear:
      return infer_linear(c);
    case OpFamily::Conv2d:
      return infer_conv2d(c);
    case OpFamily::Pool2d:
      return infer_pool2d(c);
    case OpFamily::Unfold:
      return infer_unfold(c);
    case OpFamily::Cat:
      return infer_cat(c);
    case OpFamily::IndexSelect:
      return infer_index_select(c);
    case OpFamily::Gather:
    case OpFamily::Scatter:
    case OpFamily::Sort:
    case OpFamily::Scan:
      return infer_along_dim(c);
    case OpFamily::Sample:
      return infer_multinomial(c);
    case OpFamily::Nonzero:
      return infer_nonzero(c);
    case OpFamily::ToDevice:
      return infer_to_device(c);
    case OpFamily::Factory:
      return infer_factory(c);
    case OpFamily::Random:
      return infer_random(c);
    case OpFamily::View:
      return infer_view(c);
    case OpFamily::Collective:
      return infer_collective(c);
  }
  throw Error(cat("[", c.name(), "] has no shape rule"));
}

}  // namespace kiln
