// Module-level op functions (kiln.relu, kiln.add, kiln.softmax, kiln.zeros, ...).
//
// The pointwise unary and binary ops are generated from the op table at import time:
// every row of ops/ops.def in the Unary or Binary family becomes kiln.<name> (and a
// Tensor method of that name), dispatched through the same OpCall the C++ API builds,
// so a new row there shows up in Python with no edit here. Ops whose arguments need
// more than tensors and scalars (dims, sizes, attributes) are bound one by one below.
// tests/python/test_registry.py checks that every row of the table is reachable.
#include "common.h"
#include "runtime/cuda_context.h"
#include "runtime/parallel.h"

namespace kiln::python {
namespace {

// ---- generated: pointwise unary and binary ops from the op table

struct UnaryOp {
  OpId id;
  Tensor operator()(const Tensor& x) const {
    OpCall call;
    call.op = id;
    call.inputs.push_back(x);
    return dispatch(call);
  }
};
struct BinaryTensorTensor {
  OpId id;
  Tensor operator()(const Tensor& a, const Tensor& b) const {
    OpCall call;
    call.op = id;
    call.inputs.push_back(a);
    call.inputs.push_back(b);
    return dispatch(call);
  }
};
struct BinaryTensorScalar {
  OpId id;
  Tensor operator()(const Tensor& a, const Scalar& b) const {
    OpCall call;
    call.op = id;
    call.inputs.push_back(a);
    call.scalars.push_back(b);
    return dispatch(call);
  }
};
struct BinaryScalarTensor {
  OpId id;
  Tensor operator()(const Scalar& a, const Tensor& b) const {
    OpCall call;
    call.op = id;
    call.inputs.push_back(b);
    call.scalars.push_back(a);
    call.attrs.scalar_first = true;
    return dispatch(call);
  }
};

namespace mpl = boost::mpl;

void add_generated_ops() {
  bp::object module = bp::scope();
  bp::object cls(bp::handle<>(bp::borrowed(tensor_type())));
  auto policies = bp::default_call_policies();
  // Boost.Python chains overloads through the function objects themselves, so the
  // module and the class each get their own objects.
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    const char* name = info.name;
    if (info.family == OpFamily::Unary) {
      // Cast takes a dtype and Gelu an attribute: both are bound by hand below.
      if (info.id == OpId::Cast || info.id == OpId::Gelu) continue;
      for (bp::object* ns : {&module, &cls}) {
        bp::objects::add_to_namespace(
            *ns, name,
            bp::make_function(UnaryOp{info.id}, policies, mpl::vector<Tensor, const Tensor&>()));
      }
    } else if (info.family == OpFamily::Binary) {
      // Later overloads are tried first: tensor-tensor, then tensor-scalar.
      for (bp::object* ns : {&module, &cls}) {
        if (ns == &module) {
          bp::objects::add_to_namespace(
              *ns, name,
              bp::make_function(BinaryScalarTensor{info.id}, policies,
                                mpl::vector<Tensor, const Scalar&, const Tensor&>()));
        }
        bp::objects::add_to_namespace(
            *ns, name,
            bp::make_function(BinaryTensorScalar{info.id}, policies,
                              mpl::vector<Tensor, const Tensor&, const Scalar&>()));
        bp::objects::add_to_namespace(
            *ns, name,
            bp::make_function(BinaryTensorTensor{info.id}, policies,
                              mpl::vector<Tensor, const Tensor&, const Tensor&>()));
      }
    }
  }
}

const char* family_name(OpFamily f) {
  switch (f) {
    case OpFamily::Unary:
      return "unary";
    case OpFamily::Clamp:
      return "clamp";
    case OpFamily::Binary:
      return "binary";
    case OpFamily::Where:
      return "where";
    case OpFamily::Reduce:
      return "reduce";
    case OpFamily::Softmax:
      return "softmax";
    case OpFamily::LayerNorm:
      return "layer_norm";
    case OpFamily::Attention:
      return "attention";
    case OpFamily::Matmul:
      return "matmul";
    case OpFamily::Linear:
      return "linear";
    case OpFamily::Conv2d:
      return "conv2d";
    case OpFamily::Pool2d:
      return "pool2d";
    case OpFamily::Unfold:
      return "unfold";
    case OpFamily::Cat:
      return "cat";
    case OpFamily::IndexSelect:
      return "index_select";
    case OpFamily::Gather:
      return "gather";
    case OpFamily::Scatter:
      return "scatter";
    case OpFamily::Sort:
      return "sort";
    case OpFamily::Scan:
      return "scan";
    case OpFamily::Sample:
      return "sample";
    case OpFamily::Nonzero:
      return "nonzero";
    case OpFamily::ToDevice:
      return "to_device";
    case OpFamily::Factory:
      return "factory";
    case OpFamily::Random:
      return "random";
    case OpFamily::View:
      return "view";
    case OpFamily::Collective:
      return "collective";
    case OpFamily::Recurrent:
      return "recurrent";
  }
  return "?";
}

// [(name, family), ...] in table order.
bp::list op_table() {
  bp::list rows;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    rows.append(bp::make_tuple(std::string(info.name), std::string(family_name(info.family))));
  }
  return rows;
}

// ---- hand-bound ops

Tensor gelu_fn(const Tensor& x, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "[gelu] approximate must be 'none' or 'tanh', got '", approximate, "'");
  return kiln::gelu(x, approximate == "tanh");
}

Tensor clamp_fn(const Tensor& x, const bp::object& lo, const bp::object& hi) {
  // Tensor bounds are elementwise maximum / minimum (as torch.clamp allows).
  if (is_tensor(lo.ptr()) || is_tensor(hi.ptr())) {
    Tensor r = x;
    if (is_tensor(lo.ptr()))
      r = maximum(r, tensor_of(lo.ptr()));
    else if (!lo.is_none())
      r = maximum(r, bp::extract<Scalar>(lo)());
    if (is_tensor(hi.ptr()))
      r = minimum(r, tensor_of(hi.ptr()));
    else if (!hi.is_none())
      r = minimum(r, bp::extract<Scalar>(hi)());
    return r;
  }
  std::optional<Scalar> a = bp::extract<std::optional<Scalar>>(lo)();
  std::optional<Scalar> b = bp::extract<std::optional<Scalar>>(hi)();
  KILN_CHECK(a || b, ValueError, "[clamp] at least one of min and max must be given");
  return kiln::clamp(x, a, b);
}

Tensor where_ss(const Tensor& cond, const Scalar& a, const Scalar& b) {
  Tensor bt = scalar_tensor(b, TensorOptions(b.default_dtype(), cond.device()));
  return where(cond, a, bt);
}

Tensor optional_tensor(const bp::object& obj, const char* op, const char* arg) {
  if (obj.is_none()) return Tensor();
  if (!is_tensor(obj.ptr()))
    throw DTypeError(
        detail::cat("[", op, "] ", arg, " must be a Tensor or None, got ", type_name(obj)));
  return tensor_of(obj.ptr());
}

Tensor sdpa_fn(const Tensor& q, const Tensor& k, const Tensor& v, const bp::object& mask,
               bool is_causal, const bp::object& scale, double dropout_p) {
  std::optional<double> s;
  if (!scale.is_none()) s = bp::extract<double>(scale)();
  return kiln::scaled_dot_product_attention(
      q, k, v, optional_tensor(mask, "scaled_dot_product_attention", "attn_mask"), is_causal, s,
      dropout_p);
}

// The raw fused-attention rows (ops/attention_layout.h), for tests and tools; users
// call scaled_dot_product_attention. inputs: the leading tensors, then q, k, v[, mask].
Tensor attention_row(kiln::OpId op, const bp::list& tensors, bool is_causal, double scale) {
  kiln::OpCall call{op, {}, {kiln::Scalar(scale)}, {}};
  call.attrs.causal = is_causal;
  for (bp::ssize_t i = 0; i < bp::len(tensors); ++i) {
    const bp::object item = tensors[i];
    if (!item.is_none()) call.inputs.push_back(bp::extract<Tensor>(item)());
  }
  return kiln::dispatch(call);
}

Tensor layer_norm_fn(const Tensor& x, const bp::object& shape, const bp::object& weight,
                     const bp::object& bias, double eps) {
  return kiln::layer_norm(x, to_dims(shape, "layer_norm", "normalized_shape"),
                          optional_tensor(weight, "layer_norm", "weight"),
                          optional_tensor(bias, "layer_norm", "bias"), eps);
}

Tensor linear_fn(const Tensor& x, const Tensor& w, const bp::object& bias) {
  return kiln::linear(x, w, optional_tensor(bias, "linear", "bias"));
}

Tensor conv2d_fn(const Tensor& x, const Tensor& w, const bp::object& bias, const bp::object& stride,
                 const bp::object& padding) {
  return kiln::conv2d(x, w, optional_tensor(bias, "conv2d", "bias"),
                      to_pair(stride, "conv2d", "stride"), to_pair(padding, "conv2d", "padding"));
}

template <bool Max>
Tensor pool2d_fn(const Tensor& x, const bp::object& kernel, const bp::object& stride,
                 const bp::object& padding) {
  const char* op = Max ? "max_pool2d" : "avg_pool2d";
  auto k = to_pair(kernel, op, "kernel_size");
  std::array<int64_t, 2> s = {0, 0};
  if (!stride.is_none()) {
    // torch: stride=[] (empty) means "same as the kernel"
    if (!(PySequence_Check(stride.ptr()) && PySequence_Size(stride.ptr()) == 0))
      s = to_pair(stride, op, "stride");
  }
  auto p = to_pair(padding, op, "padding");
  return Max ? kiln::max_pool2d(x, k, s, p) : kiln::avg_pool2d(x, k, s, p);
}

Tensor max_pool2d_backward_fn(const Tensor& grad, const Tensor& x, const bp::object& kernel,
                              const bp::object& stride, const bp::object& padding) {
  const char* op = "max_pool2d_backward";
  const auto k = to_pair(kernel, op, "kernel_size");
  const auto s = stride.is_none() ? std::array<int64_t, 2>{0, 0} : to_pair(stride, op, "stride");
  return kiln::max_pool2d_backward(grad, x, k, s, to_pair(padding, op, "padding"));
}

Tensor im2col_fn(const Tensor& x, const bp::object& kernel, const bp::object& stride,
                 const bp::object& padding, double pad_value) {
  return kiln::im2col(x, to_pair(kernel, "im2col", "kernel_size"),
                      to_pair(stride, "im2col", "stride"), to_pair(padding, "im2col", "padding"),
                      pad_value);
}

Tensor col2im_fn(const Tensor& cols, const bp::object& output_size, const bp::object& kernel,
                 const bp::object& stride, const bp::object& padding) {
  auto size = to_pair(output_size, "col2im", "output_size");
  return kiln::col2im(cols, Dims{size[0], size[1]}, to_pair(kernel, "col2im", "kernel_size"),
                      to_pair(stride, "col2im", "stride"), to_pair(padding, "col2im", "padding"));
}

bp::tuple split_fn(const Tensor& x, const bp::object& sizes, int64_t dim) {
  PyObject* p = sizes.ptr();
  if (PyTuple_Check(p) || PyList_Check(p)) {
    Dims d = to_dims(sizes, "split", "split_size_or_sections");
    return tensor_tuple(kiln::split(x, std::vector<int64_t>(d.begin(), d.end()), dim));
  }
  return tensor_tuple(kiln::split(x, to_int(p, "split", "split_size_or_sections"), dim));
}

Tensor squeeze_fn(const Tensor& x, const bp::object& dim) {
  bp::object method = bp::object(x).attr("squeeze");
  return bp::extract<Tensor>(method(dim))();
}

// ---- factories: kiln.zeros(2, 3, dtype=..., device=...) or kiln.zeros((2, 3))

struct FactoryKw {
  std::optional<DType> dtype;
  Device device = kCPU;
  bool requires_grad = false;
};

FactoryKw factory_keywords(const bp::dict& kw, const char* op) {
  FactoryKw out;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(kw.ptr(), &pos, &key, &value)) {
    std::string k = bp::extract<std::string>(key)();
    if (k == "dtype") {
      if (value != Py_None) {
        bp::extract<DType> d(value);
        if (!d.check())
          throw DTypeError(detail::cat(
              "[", op, "] dtype must be a kiln dtype (kiln.float32, ...), got ", type_name(value)));
        out.dtype = d();
      }
    } else if (k == "device") {
      if (value != Py_None) {
        bp::extract<Device> d(value);
        if (!d.check())
          throw DTypeError(detail::cat("[", op, "] device must be a kiln.device or a string, got ",
                                       type_name(value)));
        out.device = d();
      }
    } else if (k == "requires_grad") {
      out.requires_grad = PyObject_IsTrue(value);
    } else if (k == "pin_memory") {
      KILN_CHECK(!PyObject_IsTrue(value), ValueError, "[", op, "] ", k,
                 "=True is not supported (kiln has no pinned memory)");
    } else {
      throw DTypeError(detail::cat("[", op, "] got an unexpected keyword argument '", k, "'"));
    }
  }
  return out;
}

template <Tensor (*Make)(const Dims&, TensorOptions)>
bp::object sized_factory(const bp::tuple& args, const bp::dict& kw, const char* op) {
  FactoryKw f = factory_keywords(kw, op);
  Tensor t =
      Make(sizes_from_args(args, 0, op), TensorOptions(f.dtype.value_or(DType::Float32), f.device));
  if (f.requires_grad) t.set_requires_grad(true);
  return bp::object(t);
}

bp::object empty_raw(bp::tuple args, bp::dict kw) {
  return sized_factory<&kiln::empty>(args, kw, "empty");
}
bp::object zeros_raw(bp::tuple args, bp::dict kw) {
  return sized_factory<&kiln::zeros>(args, kw, "zeros");
}
bp::object ones_raw(bp::tuple args, bp::dict kw) {
  return sized_factory<&kiln::ones>(args, kw, "ones");
}
bp::object rand_raw(bp::tuple args, bp::dict kw) {
  return sized_factory<&kiln::rand>(args, kw, "rand");
}
bp::object randn_raw(bp::tuple args, bp::dict kw) {
  return sized_factory<&kiln::randn>(args, kw, "randn");
}

Scalar scalar_arg(PyObject* obj, const char* op, const char* arg) {
  Scalar s;
  if (!is_number(obj))
    throw DTypeError(detail::cat("[", op, "] ", arg, " must be a number, got ", type_name(obj)));
  if (!to_scalar(obj, &s)) bp::throw_error_already_set();
  return s;
}

Tensor full_fn(const bp::object& size, const bp::object& value, const bp::object& dtype,
               const bp::object& device) {
  Scalar v = scalar_arg(value.ptr(), "full", "fill_value");
  DType dt = dtype.is_none() ? v.default_dtype() : bp::extract<DType>(dtype)();
  Device dev = device.is_none() ? kCPU : bp::extract<Device>(device)();
  return kiln::full(to_dims(size, "full", "size"), v, TensorOptions(dt, dev));
}

// kiln.arange(end), arange(start, end), arange(start, end, step); int64 when all are ints.
bp::object arange_raw(bp::tuple args, bp::dict kw) {
  FactoryKw f = factory_keywords(kw, "arange");
  Py_ssize_t n = PyTuple_GET_SIZE(args.ptr());
  KILN_CHECK(n >= 1 && n <= 3, DTypeError, "[arange] takes 1 to 3 positional arguments, got ", n);
  Scalar v[3];
  bool all_int = true;
  for (Py_ssize_t i = 0; i < n; ++i) {
    v[i] = scalar_arg(PyTuple_GET_ITEM(args.ptr(), i), "arange", "start/end/step");
    all_int &= !v[i].is_floating();
  }
  TensorOptions opts(f.dtype.value_or(all_int ? DType::Int64 : DType::Float32), f.device);
  Tensor t = n == 1 ? kiln::arange(v[0], opts)
                    : kiln::arange(v[0], v[1], n == 3 ? v[2] : Scalar(int64_t{1}), opts);
  if (f.requires_grad) t.set_requires_grad(true);
  return bp::object(t);
}

Tensor scalar_tensor_fn(const bp::object& value, const bp::object& dtype,
                        const bp::object& device) {
  Scalar v = scalar_arg(value.ptr(), "scalar_tensor", "value");
  DType dt = dtype.is_none() ? v.default_dtype() : bp::extract<DType>(dtype)();
  Device dev = device.is_none() ? kCPU : bp::extract<Device>(device)();
  return kiln::scalar_tensor(v, TensorOptions(dt, dev));
}

// A flat list of numbers (built by kiln.tensor from nested lists) -> a tensor.
Tensor tensor_from_flat(const bp::list& values, const Dims& shape, DType dtype,
                        const Device& device) {
  Py_ssize_t n = PyList_GET_SIZE(values.ptr());
  KILN_CHECK(n == dims_numel(shape), ShapeError, "[tensor] ", n, " values do not fill shape ",
             dims_str(shape));
  PyObject** items = PySequence_Fast_ITEMS(values.ptr());
  Tensor host;
  if (is_floating(dtype)) {
    std::vector<double> v(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      v[static_cast<size_t>(i)] = PyFloat_AsDouble(items[i]);
      if (v[static_cast<size_t>(i)] == -1.0 && PyErr_Occurred()) bp::throw_error_already_set();
    }
    host = from_vector(v, shape);
  } else {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      Scalar s;
      if (!to_scalar(items[i], &s)) bp::throw_error_already_set();
      v[static_cast<size_t>(i)] =
          s.is_floating() ? static_cast<int64_t>(s.to_double()) : s.to_int();
    }
    host = from_vector(v, shape);
  }
  return host.to(dtype).to(device);
}

// ---- CUDA queries

uintptr_t cuda_stream_handle(int device) {
  return reinterpret_cast<uintptr_t>(cuda_context::stream(device));
}

void cuda_synchronize(const bp::object& device) {
  if (!cuda_context::is_available()) return;
  if (device.is_none()) {
    for (int d = 0; d < cuda_context::device_count(); ++d) cuda_context::synchronize_checked(d);
    return;
  }
  Device d = bp::extract<Device>(device)();
  KILN_CHECK(d.is_cuda(), ValueError, "[cuda.synchronize] expected a CUDA device, got ", d.str());
  cuda_context::synchronize_checked(d.index);
}

}  // namespace

void register_ops() {
  add_generated_ops();
  bp::def("_op_table", &op_table);

  using T = const Tensor&;
  using S = const Scalar&;
  auto none = bp::object();

  // pointwise with attributes
  bp::def("gelu", &gelu_fn, (bp::arg("input"), bp::arg("approximate") = "none"));
  bp::objects::add_to_namespace(
      bp::object(bp::handle<>(bp::borrowed(tensor_type()))), "gelu",
      bp::make_function(&gelu_fn, bp::default_call_policies(),
                        (bp::arg("self"), bp::arg("approximate") = "none")));
  bp::def("clamp", &clamp_fn, (bp::arg("input"), bp::arg("min") = none, bp::arg("max") = none));
  bp::def(
      "cast", +[](T x, DType d) { return x.to(d); }, (bp::arg("input"), bp::arg("dtype")));
  bp::def("where", &where_ss);
  bp::def(
      "where", +[](T c, S a, T b) { return where(c, a, b); });
  bp::def(
      "where", +[](T c, T a, S b) { return where(c, a, b); });
  bp::def(
      "where", +[](T c, T a, T b) { return where(c, a, b); },
      (bp::arg("condition"), bp::arg("input"), bp::arg("other")));

  // reductions
  auto dim_keep = (bp::arg("input"), bp::arg("dim") = none, bp::arg("keepdim") = false);
  bp::def(
      "sum",
      +[](T x, const bp::object& dim, bool keepdim) {
        return kiln::sum(x, to_dims(dim, "sum", "dim", true), keepdim);
      },
      dim_keep);
  bp::def(
      "mean",
      +[](T x, const bp::object& dim, bool keepdim) {
        return kiln::mean(x, to_dims(dim, "mean", "dim", true), keepdim);
      },
      dim_keep);
  bp::def(
      "amax",
      +[](T x, const bp::object& dim, bool keepdim) {
        return kiln::amax(x, to_dims(dim, "amax", "dim", true), keepdim);
      },
      dim_keep);
  bp::def(
      "logsumexp",
      +[](T x, const bp::object& dim, bool keepdim) {
        return kiln::logsumexp(x, to_dims(dim, "logsumexp", "dim", true), keepdim);
      },
      dim_keep);
  bp::def(
      "amin",
      +[](T x, const bp::object& dim, bool keepdim) {
        return kiln::amin(x, to_dims(dim, "amin", "dim", true), keepdim);
      },
      dim_keep);
  bp::def(
      "argmax",
      +[](T x, const bp::object& dim, bool keepdim) {
        std::optional<int64_t> d;
        if (!dim.is_none()) d = to_int(dim.ptr(), "argmax", "dim");
        return kiln::argmax(x, d, keepdim);
      },
      dim_keep);
  bp::def(
      "_var", +[](T x, const bp::object& dim, int64_t correction, bool keepdim) {
        return kiln::var(x, to_dims(dim, "var", "dim", true), correction, keepdim);
      });
  bp::def(
      "_max_all", +[](T x) { return kiln::max(x); });
  bp::def(
      "_min_all", +[](T x) { return kiln::min(x); });

  // normalization
  bp::def(
      "softmax", +[](T x, int64_t dim) { return kiln::softmax(x, dim); },
      (bp::arg("input"), bp::arg("dim")));
  bp::def(
      "log_softmax", +[](T x, int64_t dim) { return kiln::log_softmax(x, dim); },
      (bp::arg("input"), bp::arg("dim")));
  bp::def("layer_norm", &layer_norm_fn,
          (bp::arg("input"), bp::arg("normalized_shape"), bp::arg("weight") = none,
           bp::arg("bias") = none, bp::arg("eps") = 1e-5));
  // fused attention (dropout inside on CUDA; the composite elsewhere)
  bp::def("scaled_dot_product_attention", &sdpa_fn,
          (bp::arg("query"), bp::arg("key"), bp::arg("value"), bp::arg("attn_mask") = none,
           bp::arg("is_causal") = false, bp::arg("scale") = none, bp::arg("dropout_p") = 0.0));
  bp::def(
      "attention",
      +[](T q, T k, T v, const bp::object& mask, bool is_causal, double scale) {
        return attention_row(kiln::OpId::Attention, bp::list(bp::make_tuple(q, k, v, mask)),
                             is_causal, scale);
      },
      (bp::arg("query"), bp::arg("key"), bp::arg("value"), bp::arg("attn_mask") = none,
       bp::arg("is_causal") = false, bp::arg("scale") = 1.0));
  bp::def(
      "attention_output",
      +[](T packed, T q, T k, T v, const bp::object& mask, bool is_causal, double scale) {
        return attention_row(kiln::OpId::AttentionOutput,
                             bp::list(bp::make_tuple(packed, q, k, v, mask)), is_causal, scale);
      },
      (bp::arg("packed"), bp::arg("query"), bp::arg("key"), bp::arg("value"),
       bp::arg("attn_mask") = none, bp::arg("is_causal") = false, bp::arg("scale") = 1.0));
  bp::def(
      "attention_backward",
      +[](T grad, T packed, T q, T k, T v, const bp::object& mask, bool is_causal, double scale) {
        return attention_row(kiln::OpId::AttentionBackward,
                             bp::list(bp::make_tuple(grad, packed, q, k, v, mask)), is_causal,
                             scale);
      },
      (bp::arg("grad"), bp::arg("packed"), bp::arg("query"), bp::arg("key"), bp::arg("value"),
       bp::arg("attn_mask") = none, bp::arg("is_causal") = false, bp::arg("scale") = 1.0));

  // linear algebra, convolution, pooling
  bp::def(
      "matmul", +[](T a, T b) { return kiln::matmul(a, b); }, (bp::arg("input"), bp::arg("other")));
  bp::def("linear", &linear_fn, (bp::arg("input"), bp::arg("weight"), bp::arg("bias") = none));
  bp::def("conv2d", &conv2d_fn,
          (bp::arg("input"), bp::arg("weight"), bp::arg("bias") = none, bp::arg("stride") = 1,
           bp::arg("padding") = 0));
  auto pool_args =
      (bp::arg("input"), bp::arg("kernel_size"), bp::arg("stride") = none, bp::arg("padding") = 0);
  bp::def("max_pool2d", &pool2d_fn<true>, pool_args);
  bp::def("avg_pool2d", &pool2d_fn<false>, pool_args);
  bp::def("max_pool2d_backward", &max_pool2d_backward_fn,
          (bp::arg("grad"), bp::arg("input"), bp::arg("kernel_size"), bp::arg("stride") = none,
           bp::arg("padding") = 0));
  bp::def("im2col", &im2col_fn,
          (bp::arg("input"), bp::arg("kernel_size"), bp::arg("stride") = 1, bp::arg("padding") = 0,
           bp::arg("pad_value") = 0.0));
  bp::def("col2im", &col2im_fn,
          (bp::arg("input"), bp::arg("output_size"), bp::arg("kernel_size"), bp::arg("stride") = 1,
           bp::arg("padding") = 0));

  // joining, splitting, indexing
  bp::def(
      "cat", +[](const std::vector<Tensor>& ts, int64_t dim) { return kiln::cat(ts, dim); },
      (bp::arg("tensors"), bp::arg("dim") = 0));
  bp::def(
      "stack", +[](const std::vector<Tensor>& ts, int64_t dim) { return kiln::stack(ts, dim); },
      (bp::arg("tensors"), bp::arg("dim") = 0));
  bp::def(
      "chunk",
      +[](T x, int64_t chunks, int64_t dim) { return tensor_tuple(kiln::chunk(x, chunks, dim)); },
      (bp::arg("input"), bp::arg("chunks"), bp::arg("dim") = 0));
  bp::def("split", &split_fn,
          (bp::arg("tensor"), bp::arg("split_size_or_sections"), bp::arg("dim") = 0));
  bp::objects::add_to_namespace(
      bp::object(bp::handle<>(bp::borrowed(tensor_type()))), "split",
      bp::make_function(&split_fn, bp::default_call_policies(),
                        (bp::arg("self"), bp::arg("split_size"), bp::arg("dim") = 0)));
  bp::def(
      "index_select", +[](T x, int64_t dim, T index) { return kiln::index_select(x, dim, index); },
      (bp::arg("input"), bp::arg("dim"), bp::arg("index")));
  bp::def(
      "embedding", +[](T weight, T indices) { return kiln::embedding(weight, indices); },
      (bp::arg("weight"), bp::arg("indices")));

  // data movement and views as functions (registry names: to_device, view, permute, ...)
  bp::def(
      "to_device", +[](T x, const Device& d) { return x.to(d); },
      (bp::arg("input"), bp::arg("device")));
  bp::def(
      "view", +[](T x, const Dims& sizes) { return x.view(sizes); });
  bp::def(
      "reshape", +[](T x, const Dims& sizes) { return x.reshape(sizes); },
      (bp::arg("input"), bp::arg("shape")));
  bp::def(
      "permute", +[](T x, const Dims& order) { return x.permute(order); },
      (bp::arg("input"), bp::arg("dims")));
  bp::def(
      "expand", +[](T x, const Dims& sizes) { return x.expand(sizes); });
  bp::def(
      "slice",
      +[](T x, int64_t dim, int64_t start, int64_t end, int64_t step) {
        return x.slice(dim, start, end, step);
      },
      (bp::arg("input"), bp::arg("dim"), bp::arg("start"), bp::arg("end"), bp::arg("step") = 1));
  bp::def(
      "select", +[](T x, int64_t dim, int64_t index) { return x.select(dim, index); },
      (bp::arg("input"), bp::arg("dim"), bp::arg("index")));
  bp::def(
      "narrow",
      +[](T x, int64_t dim, int64_t start, int64_t length) { return x.narrow(dim, start, length); },
      (bp::arg("input"), bp::arg("dim"), bp::arg("start"), bp::arg("length")));
  bp::def("squeeze", &squeeze_fn, (bp::arg("input"), bp::arg("dim") = none));
  bp::def(
      "unsqueeze", +[](T x, int64_t dim) { return x.unsqueeze(dim); },
      (bp::arg("input"), bp::arg("dim")));
  bp::def(
      "transpose", +[](T x, int64_t a, int64_t b) { return x.transpose(a, b); },
      (bp::arg("input"), bp::arg("dim0"), bp::arg("dim1")));
  bp::def(
      "t", +[](T x) { return x.t(); });
  bp::def(
      "flatten", +[](T x, int64_t start, int64_t end) { return x.flatten(start, end); },
      (bp::arg("input"), bp::arg("start_dim") = 0, bp::arg("end_dim") = -1));

  // factories
  bp::def("empty", bp::raw_function(&empty_raw));
  bp::def("zeros", bp::raw_function(&zeros_raw));
  bp::def("ones", bp::raw_function(&ones_raw));
  bp::def("rand", bp::raw_function(&rand_raw));
  bp::def("randn", bp::raw_function(&randn_raw));
  bp::def("arange", bp::raw_function(&arange_raw, 1));
  bp::def(
      "full", &full_fn,
      (bp::arg("size"), bp::arg("fill_value"), bp::arg("dtype") = none, bp::arg("device") = none));
  bp::def("scalar_tensor", &scalar_tensor_fn,
          (bp::arg("value"), bp::arg("dtype") = none, bp::arg("device") = none));
  bp::def("_tensor_from_flat", &tensor_from_flat);
  bp::def(
      "manual_seed", +[](uint64_t seed) { kiln::manual_seed(seed); }, bp::arg("seed"));
  bp::def(
      "result_type", +[](T a, T b) { return kiln::result_type(a, b); });
  bp::def(
      "result_type", +[](T a, S b) { return kiln::result_type(a, b); });

  // threads and CUDA
  bp::def("get_num_threads", &num_threads);
  bp::def("set_num_threads", &set_num_threads);
  bp::def("_cuda_built", &cuda_context::built_with_cuda);
  bp::def("_cuda_is_available", &cuda_context::is_available);
  bp::def("_cuda_device_count", &cuda_context::device_count);
  bp::def("_cuda_device_name", &cuda_context::device_name);
  bp::def("_cuda_synchronize", &cuda_synchronize, (bp::arg("device") = none));
  bp::def("_cuda_empty_cache", &cuda_context::empty_cache);
  bp::def(
      "_cuda_memory_allocated", +[](int d) { return cuda_context::allocated_bytes(d); });
  bp::def(
      "_cuda_memory_cached", +[](int d) { return cuda_context::cached_bytes(d); });
  bp::def(
      "_cuda_max_memory_allocated", +[](int d) { return cuda_context::peak_allocated_bytes(d); });
  bp::def(
      "_cuda_reset_peak_memory_stats", +[](int d) { cuda_context::reset_peak_allocated(d); });
  bp::def("_cuda_stream_handle", &cuda_stream_handle);
}

}  // namespace kiln::python
