// class kiln.Tensor: metadata, views, conversions, arithmetic and comparison
// operators (reflected ones with Python scalars too), in-place methods, reductions.
//
// A Python Tensor object holds a kiln::Tensor handle by value (a shared_ptr copy), so
// views returned to Python keep the storage alive on their own. Operators are bound
// straight to the C++ operators; + - * / @ on tensors and numbers then take the type's
// number slots directly (tensor_operators.cpp). Overloads are tried in reverse order of
// definition: the tensor-tensor form is defined last, so it is tried first.
#include "common.h"

namespace kiln::python {
namespace {

namespace cv = bp::converter;

PyObject* g_tensor_type = nullptr;

const Tensor& self_of(const bp::tuple& args, const char* method) {
  PyObject* self = PyTuple_GET_SIZE(args.ptr()) > 0 ? PyTuple_GET_ITEM(args.ptr(), 0) : nullptr;
  if (!self || !is_tensor(self))
    throw DTypeError(detail::cat("[", method, "] must be called on a kiln.Tensor"));
  return tensor_of(self);
}

void no_keywords(const bp::dict& kw, const char* method) {
  if (PyDict_Size(kw.ptr()) != 0)
    throw DTypeError(detail::cat("[", method, "] takes no keyword arguments"));
}

// ---- metadata

bp::object sizes_of(const Tensor& t) { return bp::object(t.sizes()); }
bp::object strides_of(const Tensor& t) { return bp::object(t.strides()); }
uintptr_t data_ptr_of(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

// ---- values on the host

bp::object item_of(const Tensor& t) {
  KILN_CHECK(t.numel() == 1, ValueError,
             "[item] only one element tensors can be converted to Python scalars, got ", t.numel(),
             " elements (shape ", dims_str(t.sizes()), ")");
  return scalar_to_python(t.item());
}

template <class T, class Make>
PyObject* build_list(const std::vector<T>& values, const Dims& sizes, size_t dim, int64_t* pos,
                     Make make) {
  if (dim == sizes.size()) return make(values[static_cast<size_t>((*pos)++)]);
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(sizes[dim]));
  if (!list) bp::throw_error_already_set();
  for (int64_t i = 0; i < sizes[dim]; ++i) {
    PyObject* item = build_list(values, sizes, dim + 1, pos, make);
    if (!item) {
      Py_DECREF(list);
      bp::throw_error_already_set();
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), item);
  }
  return list;
}

bp::object tolist(const Tensor& t) {
  int64_t pos = 0;
  PyObject* result;
  if (is_floating(t.dtype())) {
    result = build_list(t.to_vector<double>(), t.sizes(), 0, &pos,
                        [](double v) { return PyFloat_FromDouble(v); });
  } else if (t.dtype() == DType::Bool) {
    result = build_list(t.to_vector<int64_t>(), t.sizes(), 0, &pos,
                        [](int64_t v) { return PyBool_FromLong(v != 0); });
  } else {
    result = build_list(t.to_vector<int64_t>(), t.sizes(), 0, &pos,
                        [](int64_t v) { return PyLong_FromLongLong(v); });
  }
  return bp::object(bp::handle<>(result));
}

bool tensor_bool(const Tensor& t) {
  KILN_CHECK(t.numel() != 0, Error, "Boolean value of Tensor with no values is ambiguous");
  KILN_CHECK(t.numel() == 1, Error,
             "Boolean value of Tensor with more than one value is ambiguous");
  return t.item().to<bool>();
}

double tensor_float(const Tensor& t) {
  KILN_CHECK(t.numel() == 1, ValueError,
             "only one element tensors can be converted to Python scalars");
  return t.item().to_double();
}

bp::object tensor_int(const Tensor& t) {
  KILN_CHECK(t.numel() == 1, ValueError,
             "only one element tensors can be converted to Python scalars");
  Scalar s = t.item();
  if (s.is_floating()) {
    bp::object f(s.to_double());
    return bp::object(bp::handle<>(PyNumber_Long(f.ptr())));
  }
  return bp::object(s.to_int());
}

int64_t tensor_index(const Tensor& t) {
  KILN_CHECK(t.numel() == 1 && is_integral(t.dtype()), DTypeError,
             "only integer tensors of a single element can be converted to an index");
  return t.item().to_int();
}

int64_t tensor_len(const Tensor& t) {
  KILN_CHECK(t.dim() > 0, DTypeError, "len() of a 0-d tensor");
  return t.size(0);
}

int64_t tensor_hash(const bp::object& self) {
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(self.ptr()) >> 4);
}

bp::object not_implemented(const Tensor&, const bp::object&) {
  return bp::object(bp::handle<>(bp::borrowed(Py_NotImplemented)));
}

// ---- views with varargs sizes: x.view(2, 3) or x.view((2, 3))

bp::object view_raw(bp::tuple args, bp::dict kw) {
  const Tensor& self = self_of(args, "view");
  no_keywords(kw, "view");
  return bp::object(self.view(sizes_from_args(args, 1, "view")));
}
bp::object reshape_raw(bp::tuple args, bp::dict kw) {
  const Tensor& self = self_of(args, "reshape");
  no_keywords(kw, "reshape");
  return bp::object(self.reshape(sizes_from_args(args, 1, "reshape")));
}
bp::object permute_raw(bp::tuple args, bp::dict kw) {
  const Tensor& self = self_of(args, "permute");
  no_keywords(kw, "permute");
  return bp::object(self.permute(sizes_from_args(args, 1, "permute")));
}
bp::object expand_raw(bp::tuple args, bp::dict kw) {
  const Tensor& self = self_of(args, "expand");
  no_keywords(kw, "expand");
  return bp::object(self.expand(sizes_from_args(args, 1, "expand")));
}

Tensor reverse_dims(const Tensor& t) {
  Dims order;
  for (int64_t d = t.dim() - 1; d >= 0; --d) order.push_back(d);
  return t.dim() < 2 ? t : t.permute(order);
}

Tensor squeeze_dims(const Tensor& t, const bp::object& dim) {
  if (dim.is_none()) return t.squeeze();
  Dims dims = to_dims(dim, "squeeze", "dim");
  for (auto& d : dims) d = wrap_dim(d, t.dim(), "squeeze");
  std::sort(dims.begin(), dims.end());
  Tensor r = t;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (it + 1 != dims.rend() && *(it + 1) == *it) continue;
    if (r.size(*it) == 1) r = r.squeeze(*it);  // torch: a dim of size > 1 is left as is
  }
  return r;
}

Tensor cuda_of(const Tensor& t, const bp::object& device) {
  if (device.is_none()) return t.cuda(0);
  Device d = bp::extract<Device>(device)();
  KILN_CHECK(d.is_cuda(), ValueError, "[cuda] expected a CUDA device, got ", d.str());
  return t.cuda(d.index);
}

// A new handle aliasing t's memory (kiln has no autograd, so nothing else to drop).
// A view op rather than a copy of the TensorImpl: a lazy value (tracer replay) gets
// its storage later, and only the impl the tracer knows about receives it.
Tensor detach(const Tensor& t) { return t.detach(); }

// ---- reductions as methods

std::optional<DType> opt_dtype(const bp::object& dtype) {
  if (dtype.is_none()) return std::nullopt;
  return bp::extract<DType>(dtype)();
}

Tensor sum_m(const Tensor& x, const bp::object& dim, bool keepdim, const bp::object& dtype) {
  auto dt = opt_dtype(dtype);
  return kiln::sum(dt ? x.to(*dt) : x, to_dims(dim, "sum", "dim", true), keepdim);
}
Tensor mean_m(const Tensor& x, const bp::object& dim, bool keepdim, const bp::object& dtype) {
  auto dt = opt_dtype(dtype);
  return kiln::mean(dt ? x.to(*dt) : x, to_dims(dim, "mean", "dim", true), keepdim);
}
Tensor amax_m(const Tensor& x, const bp::object& dim, bool keepdim) {
  return kiln::amax(x, to_dims(dim, "amax", "dim", true), keepdim);
}
Tensor logsumexp_m(const Tensor& x, const bp::object& dim, bool keepdim) {
  return kiln::logsumexp(x, to_dims(dim, "logsumexp", "dim", true), keepdim);
}
Tensor amin_m(const Tensor& x, const bp::object& dim, bool keepdim) {
  return kiln::amin(x, to_dims(dim, "amin", "dim", true), keepdim);
}
Tensor argmax_m(const Tensor& x, const bp::object& dim, bool keepdim) {
  std::optional<int64_t> d;
  if (!dim.is_none()) d = to_int(dim.ptr(), "argmax", "dim");
  return kiln::argmax(x, d, keepdim);
}
Tensor var_m(const Tensor& x, const bp::object& dim, int64_t correction, bool keepdim) {
  return kiln::var(x, to_dims(dim, "var", "dim", true), correction, keepdim);
}

// ---- in place

void fill_tensor(Tensor& self, const Tensor& value) {
  KILN_CHECK(value.dim() == 0, ShapeError,
             "[fill_] the value must be a 0-dim tensor or a number, got shape ",
             dims_str(value.sizes()));
  self.copy_(value);
}

void clamp_inplace(Tensor& self, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  KILN_CHECK(lo || hi, ValueError, "[clamp_] at least one of min and max must be given");
  if (lo && hi) {
    self.clamp_(*lo, *hi);
  } else {
    self.copy_(kiln::clamp(self, lo, hi));
  }
}

Tensor matmul_m(const Tensor& a, const Tensor& b) { return kiln::matmul(a, b); }

// Binary operator families: tensor-tensor, tensor-scalar, and (reflected) scalar-tensor.
template <class Class>
void def_arith(Class& cls) {
  using T = const Tensor&;
  using S = const Scalar&;
  cls.def(
         "__add__", +[](T a, S b) { return a + b; })
      .def(
          "__add__", +[](T a, T b) { return a + b; })
      .def(
          "__radd__", +[](T a, S b) { return b + a; })
      .def(
          "__sub__", +[](T a, S b) { return a - b; })
      .def(
          "__sub__", +[](T a, T b) { return a - b; })
      .def(
          "__rsub__", +[](T a, S b) { return b - a; })
      .def(
          "__mul__", +[](T a, S b) { return a * b; })
      .def(
          "__mul__", +[](T a, T b) { return a * b; })
      .def(
          "__rmul__", +[](T a, S b) { return b * a; })
      .def(
          "__truediv__", +[](T a, S b) { return a / b; })
      .def(
          "__truediv__", +[](T a, T b) { return a / b; })
      .def(
          "__rtruediv__", +[](T a, S b) { return b / a; })
      .def(
          "__pow__", +[](T a, S b) { return kiln::pow(a, b); })
      .def(
          "__pow__", +[](T a, T b) { return kiln::pow(a, b); })
      .def(
          "__rpow__", +[](T a, S b) { return kiln::pow(b, a); })
      .def("__matmul__", &matmul_m)
      .def(
          "__neg__", +[](T a) { return -a; })
      .def(
          "__pos__", +[](T a) { return a; })
      .def(
          "__abs__", +[](T a) { return kiln::abs(a); })
      // comparisons; anything else compares as "not implemented" (so == None is False)
      .def("__eq__", &not_implemented)
      .def(
          "__eq__", +[](T a, S b) { return a == b; })
      .def(
          "__eq__", +[](T a, T b) { return a == b; })
      .def("__ne__", &not_implemented)
      .def(
          "__ne__", +[](T a, S b) { return a != b; })
      .def(
          "__ne__", +[](T a, T b) { return a != b; })
      .def(
          "__lt__", +[](T a, S b) { return a < b; })
      .def(
          "__lt__", +[](T a, T b) { return a < b; })
      .def(
          "__le__", +[](T a, S b) { return a <= b; })
      .def(
          "__le__", +[](T a, T b) { return a <= b; })
      .def(
          "__gt__", +[](T a, S b) { return a > b; })
      .def(
          "__gt__", +[](T a, T b) { return a > b; })
      .def(
          "__ge__", +[](T a, S b) { return a >= b; })
      .def(
          "__ge__", +[](T a, T b) { return a >= b; });
  // in place: `x += y` writes into x and returns x itself
  cls.def(
         "__iadd__", +[](Tensor& a, S b) { a.add_(b); }, bp::return_self<>())
      .def(
          "__iadd__", +[](Tensor& a, T b) { a.add_(b); }, bp::return_self<>())
      .def(
          "__isub__", +[](Tensor& a, S b) { a.sub_(b); }, bp::return_self<>())
      .def(
          "__isub__", +[](Tensor& a, T b) { a.sub_(b); }, bp::return_self<>())
      .def(
          "__imul__", +[](Tensor& a, S b) { a.mul_(b); }, bp::return_self<>())
      .def(
          "__imul__", +[](Tensor& a, T b) { a.mul_(b); }, bp::return_self<>())
      .def(
          "__itruediv__", +[](Tensor& a, S b) { a.div_(b); }, bp::return_self<>())
      .def(
          "__itruediv__", +[](Tensor& a, T b) { a.div_(b); }, bp::return_self<>());
}

template <class Class>
void def_inplace(Class& cls) {
  using T = const Tensor&;
  using S = const Scalar&;
  auto self = bp::return_self<>();
  cls.def(
         "add_", +[](Tensor& a, S b) { a.add_(b); }, self)
      .def(
          "add_", +[](Tensor& a, T b) { a.add_(b); }, self)
      .def(
          "sub_", +[](Tensor& a, S b) { a.sub_(b); }, self)
      .def(
          "sub_", +[](Tensor& a, T b) { a.sub_(b); }, self)
      .def(
          "mul_", +[](Tensor& a, S b) { a.mul_(b); }, self)
      .def(
          "mul_", +[](Tensor& a, T b) { a.mul_(b); }, self)
      .def(
          "div_", +[](Tensor& a, S b) { a.div_(b); }, self)
      .def(
          "div_", +[](Tensor& a, T b) { a.div_(b); }, self)
      .def(
          "copy_", +[](Tensor& a, T src) { a.copy_(src); }, self)
      .def(
          "fill_", +[](Tensor& a, S v) { a.fill_(v); }, self)
      .def("fill_", &fill_tensor, self)
      .def(
          "zero_", +[](Tensor& a) { a.zero_(); }, self)
      .def(
          "relu_", +[](Tensor& a) { a.relu_(); }, self)
      .def("clamp_", &clamp_inplace,
           (bp::arg("self"), bp::arg("min") = bp::object(), bp::arg("max") = bp::object()), self);
}

}  // namespace

PyObject* tensor_type() { return g_tensor_type; }

const Tensor& tensor_of(PyObject* obj) {
  if (const Tensor* t = fast_tensor_of(obj)) return *t;
  void* p = cv::get_lvalue_from_python(obj, cv::registered<Tensor>::converters);
  if (!p) bp::throw_error_already_set();
  return *static_cast<Tensor*>(p);
}

void register_tensor_class() {
  using T = const Tensor&;
  bp::class_<Tensor> cls("Tensor",
                         "A multi-dimensional array on the CPU or a CUDA device. Create one with "
                         "kiln.tensor, kiln.zeros, kiln.from_numpy, ...",
                         bp::no_init);
  g_tensor_type = cls.ptr();

  // metadata
  cls.add_property("_sizes", &sizes_of)
      .add_property("_strides", &strides_of)
      .add_property("ndim", &Tensor::dim)
      .add_property("dtype", &Tensor::dtype)
      .add_property("device", &Tensor::device)
      .add_property("is_cuda", &Tensor::is_cuda)
      .add_property(
          "is_cpu", +[](T t) { return t.device().is_cpu(); })
      .add_property("itemsize", &Tensor::element_size)
      .add_property(
          "nbytes", +[](T t) { return t.numel() * t.element_size(); })
      .add_property("T", &reverse_dims)
      .add_property(
          "mT", +[](T t) { return t.transpose(-2, -1); })
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def("data_ptr", &data_ptr_of)
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("_size", &Tensor::size)
      .def("_stride", &Tensor::stride)
      .def("_meta_str", &Tensor::meta_str)
      .def(
          "_same", +[](T a, T b) { return a.same(b); })
      .def(
          "_shares_storage", +[](T a, T b) { return a.storage() == b.storage(); });

  // values
  cls.def("item", &item_of)
      .def("tolist", &tolist)
      .def("__bool__", &tensor_bool)
      .def("__float__", &tensor_float)
      .def("__int__", &tensor_int)
      .def("__index__", &tensor_index)
      .def("__len__", &tensor_len)
      .def("__hash__", &tensor_hash);

  // views (share storage)
  cls.def("view", bp::raw_function(&view_raw, 1))
      .def("reshape", bp::raw_function(&reshape_raw, 1))
      .def("permute", bp::raw_function(&permute_raw, 1))
      .def("expand", bp::raw_function(&expand_raw, 1))
      .def("transpose", &Tensor::transpose)
      .def("swapaxes", &Tensor::transpose)
      .def("t", &Tensor::t)
      .def("narrow", &Tensor::narrow)
      .def("select", &Tensor::select)
      .def("squeeze", &squeeze_dims, (bp::arg("self"), bp::arg("dim") = bp::object()))
      .def("unsqueeze", &Tensor::unsqueeze)
      .def("flatten", &Tensor::flatten,
           (bp::arg("self"), bp::arg("start_dim") = 0, bp::arg("end_dim") = -1))
      .def(
          "view_as", +[](T a, T b) { return a.view(b.sizes()); })
      .def(
          "reshape_as", +[](T a, T b) { return a.reshape(b.sizes()); })
      .def(
          "expand_as", +[](T a, T b) { return a.expand(b.sizes()); })
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("detach", &detach);

  // conversions
  cls.def(
         "_to_device", +[](T t, const Device& d) { return t.to(d); })
      .def(
          "_to_dtype", +[](T t, DType d) { return t.to(d); })
      .def("cpu", &Tensor::cpu)
      .def("cuda", &cuda_of, (bp::arg("self"), bp::arg("device") = bp::object()))
      .def(
          "float", +[](T t) { return t.to(DType::Float32); })
      .def(
          "double", +[](T t) { return t.to(DType::Float64); })
      .def(
          "half", +[](T t) { return t.to(DType::Float16); })
      .def(
          "bfloat16", +[](T t) { return t.to(DType::BFloat16); })
      .def(
          "long", +[](T t) { return t.to(DType::Int64); })
      .def(
          "int", +[](T t) { return t.to(DType::Int32); })
      .def(
          "bool", +[](T t) { return t.to(DType::Bool); })
      .def(
          "type_as", +[](T a, T b) { return a.to(b.dtype()); });

  // reductions
  auto dim_keep = (bp::arg("self"), bp::arg("dim") = bp::object(), bp::arg("keepdim") = false);
  auto dim_keep_dtype = (bp::arg("self"), bp::arg("dim") = bp::object(), bp::arg("keepdim") = false,
                         bp::arg("dtype") = bp::object());
  cls.def("sum", &sum_m, dim_keep_dtype)
      .def("mean", &mean_m, dim_keep_dtype)
      .def("amax", &amax_m, dim_keep)
      .def("amin", &amin_m, dim_keep)
      .def("logsumexp", &logsumexp_m, dim_keep)
      .def("argmax", &argmax_m, dim_keep)
      .def("_var", &var_m);

  // other ops as methods
  cls.def("matmul", &matmul_m)
      .def(
          "softmax", +[](T x, int64_t dim) { return kiln::softmax(x, dim); }, bp::arg("dim"))
      .def(
          "log_softmax", +[](T x, int64_t dim) { return kiln::log_softmax(x, dim); },
          bp::arg("dim"))
      .def(
          "index_select",
          +[](T x, int64_t dim, T index) { return kiln::index_select(x, dim, index); },
          (bp::arg("self"), bp::arg("dim"), bp::arg("index")))
      .def(
          "chunk",
          +[](T x, int64_t chunks, int64_t dim) {
            return tensor_tuple(kiln::chunk(x, chunks, dim));
          },
          (bp::arg("self"), bp::arg("chunks"), bp::arg("dim") = 0));

  def_arith(cls);
  install_tensor_operators();
  def_inplace(cls);
}

}  // namespace kiln::python
