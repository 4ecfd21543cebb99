// The Tensor methods that compute (declared in runtime/tensor.h): views, copies and
// conversions, host reads, printing and in-place updates. Each builds an OpCall and goes
// through the dispatcher, so the tracer and autograd see it. They live in the ops layer
// because they call it: the runtime declares them but neither defines nor calls them
// (the autograd methods are in ops/autograd/tensor_methods.cpp).
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "ops/api.h"
#include "ops/dispatch.h"
#include "ops/view_rules.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace kiln {

// ---- printing

namespace {

void format_values(std::ostringstream& os, const std::vector<double>& values, const Dims& sizes,
                   size_t dim, int64_t& index, bool floating, int indent) {
  if (dim == sizes.size()) {
    const double v = values[index++];
    if (!floating) {
      os << static_cast<long long>(v);
    } else if (std::isnan(v)) {
      os << "nan";
    } else if (std::isinf(v)) {
      os << (v < 0 ? "-inf" : "inf");
    } else {
      std::ostringstream e;
      e.setf(std::ios::fixed);
      e.precision(4);
      e << v;
      os << e.str();
    }
    return;
  }
  os << "[";
  const int64_t n = sizes[dim];
  const bool summarize = n > 6 && static_cast<int64_t>(values.size()) > 1000;
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && i == 3) {
      os << "...";
      int64_t skip = (n - 6);
      int64_t inner = 1;
      for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
      index += skip * inner;
      i += skip - 1;
      os << (dim + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    format_values(os, values, sizes, dim + 1, index, floating, indent + 1);
    if (i + 1 < n) os << (dim + 1 == sizes.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

}  // namespace

std::string Tensor::str(std::source_location loc) const {
  if (!defined()) return "tensor(undefined)";
  lazy::sync("printing a tensor", SourceSite::from(loc));
  std::vector<double> values = to_vector<double>(loc);
  std::ostringstream os;
  os << "tensor(";
  int64_t index = 0;
  if (dtype() == DType::Bool) {
    // print True/False
    std::ostringstream b;
    std::vector<double> v = values;
    int64_t i = 0;
    format_values(b, v, sizes(), 0, i, false, 7);
    std::string s = b.str();
    std::string out;
    for (char ch : s) out += ch == '1' ? "True" : ch == '0' ? "False" : std::string(1, ch);
    os << out;
  } else {
    format_values(os, values, sizes(), 0, index, is_floating(dtype()), 7);
  }
  if (dtype() != DType::Float32 && dtype() != DType::Int64 && dtype() != DType::Bool)
    os << ", dtype=" << dtype_name(dtype());
  if (device().is_cuda()) os << ", device='" << device().str() << "'";
  os << ")";
  return os.str();
}

// ---- views

namespace {

Tensor run_view(OpId op, const Tensor& x, OpAttrs attrs) {
  OpCall call{op, {x}, {}, std::move(attrs)};
  return dispatch(call);
}

}  // namespace

Tensor Tensor::view(const Dims& sizes) const {
  OpAttrs a;
  a.dims = sizes;
  return run_view(OpId::View, *this, std::move(a));
}

Tensor Tensor::reshape(const Dims& sizes) const {
  const Dims resolved = infer_size(sizes, numel(), "reshape");
  Dims strides;
  if (compute_view_strides(this->sizes(), this->strides(), resolved, &strides)) {
    return view(resolved);
  }
  return clone().view(resolved);
}

Tensor Tensor::permute(const Dims& order) const {
  OpAttrs a;
  a.dims = order;
  return run_view(OpId::Permute, *this, std::move(a));
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  const int64_t r = dim();
  d0 = wrap_dim(d0, r, "transpose", "dim0");
  d1 = wrap_dim(d1, r, "transpose", "dim1");
  if (r == 0) return *this;
  Dims order(r);
  for (int64_t i = 0; i < r; ++i) order[i] = i;
  std::swap(order[d0], order[d1]);
  return permute(order);
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, ShapeError, "[t] expects a tensor with at most 2 dims, got shape ",
             dims_str(sizes()), "; use transpose() or permute()");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  OpAttrs a;
  a.dim = d;
  a.start = start;
  a.end = end;
  a.step = step;
  return run_view(OpId::Slice, *this, std::move(a));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CHECK(dim() > 0, IndexError, "[narrow] cannot narrow a 0-dim tensor");
  const int64_t n = size(d);
  const int64_t s = start < 0 ? start + n : start;
  KILN_CHECK(s >= 0 && length >= 0 && s + length <= n, IndexError, "[narrow] start ", start,
             " and length ", length, " are out of range for dim ", d, " with size ", n);
  return slice(d, s, s + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  OpAttrs a;
  a.dim = d;
  a.start = index;
  return run_view(OpId::Select, *this, std::move(a));
}

Tensor Tensor::expand(const Dims& sizes) const {
  OpAttrs a;
  a.dims = sizes;
  return run_view(OpId::Expand, *this, std::move(a));
}

Tensor Tensor::squeeze() const { return run_view(OpId::Squeeze, *this, OpAttrs{}); }

Tensor Tensor::squeeze(int64_t d) const {
  OpAttrs a;
  a.dims = {wrap_dim(d, dim(), "squeeze")};
  return run_view(OpId::Squeeze, *this, std::move(a));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  OpAttrs a;
  a.dim = d;
  return run_view(OpId::Unsqueeze, *this, std::move(a));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten", "start_dim");
  const int64_t e = wrap_dim(end_dim, dim(), "flatten", "end_dim");
  KILN_CHECK(s <= e, IndexError, "[flatten] start_dim ", start_dim, " comes after end_dim ",
             end_dim);
  Dims sizes;
  for (int64_t i = 0; i < s; ++i) sizes.push_back(size(i));
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= size(i);
  sizes.push_back(merged);
  for (int64_t i = e + 1; i < dim(); ++i) sizes.push_back(size(i));
  return reshape(sizes);
}

// ---- copies and conversions

namespace {

Tensor run_cast(const Tensor& x, DType dtype) {
  OpCall call{OpId::Cast, {x}, {}, {}};
  call.attrs.dtype = dtype;
  return dispatch(call);
}

}  // namespace

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }
Tensor Tensor::clone() const { return run_cast(*this, dtype()); }

Tensor Tensor::to(DType dtype) const {
  return dtype == this->dtype() ? *this : run_cast(*this, dtype);
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  OpCall call{OpId::ToDevice, {*this}, {}, {}};
  call.attrs.device = device;
  return dispatch(call);
}

Tensor Tensor::cuda(int index) const { return to(Device(DeviceType::CUDA, index)); }

template <class T>
std::vector<T> Tensor::to_vector(std::source_location loc) const {
  const bool independent = lazy::sync("to_vector()", SourceSite::from(loc), impl_.get());
  lazy::PendingPause pause(independent);  // the trace goes on: its pending work stays pending
  // Every pending value has run now: one still missing is owed by a failed replay.
  if (!impl_->storage) lazy::throw_unavailable("[read] the tensor", impl_->pending.get());
  NoHookScope host_read;  // the copy below is kiln's own work, not the user's op stream
  constexpr DType target = dtype_of<T>();
  Tensor host = to(kCPU).to(target).contiguous();
  std::vector<T> out(static_cast<size_t>(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::to_vector<float>(std::source_location) const;
template std::vector<double> Tensor::to_vector<double>(std::source_location) const;
template std::vector<int32_t> Tensor::to_vector<int32_t>(std::source_location) const;
template std::vector<int64_t> Tensor::to_vector<int64_t>(std::source_location) const;
template std::vector<Half> Tensor::to_vector<Half>(std::source_location) const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>(std::source_location) const;

Scalar Tensor::item(std::source_location loc) const {
  KILN_CHECK(numel() == 1, ValueError,
             "[item] only a tensor with one element can be converted "
             "to a scalar, got shape ",
             dims_str(sizes()), " (", numel(), " elements)");
  const bool independent = lazy::sync("item()", SourceSite::from(loc), impl_.get());
  lazy::PendingPause pause(independent);
  if (is_floating(dtype())) return Scalar(to_vector<double>(loc)[0]);
  const int64_t v = to_vector<int64_t>(loc)[0];
  if (dtype() == DType::Bool) return Scalar(v != 0);
  return Scalar(v);
}

// ---- in place

Tensor& Tensor::copy_(const Tensor& src) {
  KILN_CHECK(src.defined(), ValueError, "[copy_] the source tensor is undefined");
  Tensor s = src.device() == device() ? src : src.to(device());
  if (s.sizes() != sizes()) s = s.expand(sizes());
  OpCall call{OpId::Cast, {s}, {}, {}};
  call.attrs.dtype = dtype();
  dispatch_into(call, *this);
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  if (is_contiguous()) {
    OpCall call{OpId::Full, {}, {value}, {}};
    call.attrs.dims = sizes();
    call.attrs.dtype = dtype();
    call.attrs.device = device();
    dispatch_into(call, *this);
    return *this;
  }
  return copy_(full({}, value, TensorOptions(dtype(), device())));
}

Tensor& Tensor::zero_() { return fill_(Scalar(0)); }

#define KILN_INPLACE_BINARY(method, Id)                             \
  Tensor& Tensor::method(const Tensor& other) {                     \
    dispatch_into(OpCall{OpId::Id, {*this, other}, {}, {}}, *this); \
    return *this;                                                   \
  }                                                                 \
  Tensor& Tensor::method(const Scalar& other) {                     \
    dispatch_into(OpCall{OpId::Id, {*this}, {other}, {}}, *this);   \
    return *this;                                                   \
  }
KILN_INPLACE_BINARY(add_, Add)
KILN_INPLACE_BINARY(sub_, Sub)
KILN_INPLACE_BINARY(mul_, Mul)
KILN_INPLACE_BINARY(div_, Div)
#undef KILN_INPLACE_BINARY

Tensor& Tensor::clamp_(const Scalar& min, const Scalar& max) {
  OpCall call{OpId::Clamp, {*this}, {min, max}, {}};
  call.attrs.has_min = call.attrs.has_max = true;
  dispatch_into(call, *this);
  return *this;
}

Tensor& Tensor::relu_() {
  dispatch_into(OpCall{OpId::Relu, {*this}, {}, {}}, *this);
  return *this;
}

}  // namespace kiln
