// Conversions between Python objects and the C++ API's value types.
//
//   Scalar            <- bool, int, float, numpy scalars;  -> bool / int / float
//   optional<Scalar>  <- None or a Scalar
//   DType             <- kiln.float32 (class kiln.dtype) or the Python types float,
//                        int, bool (float64, int64, bool, like torch);
//                     -> the module's singleton dtype objects, so `t.dtype is kiln.float32`
//   Device            <- kiln.device, "cpu" / "cuda" / "cuda:1", an int (CUDA ordinal),
//                        torch.device
//   Dims              <- tuple / list (kiln.Size) of ints;  -> tuple
//   vector<Tensor>    <- tuple / list of tensors;  -> tuple
//   vector<int64_t>   <- tuple / list of ints
#include <cstring>

#include "common.h"

namespace kiln::python {
namespace {

namespace cv = bp::converter;

// ---- Scalar

bool is_numpy_scalar(PyObject* obj) {
  const char* name = Py_TYPE(obj)->tp_name;
  return std::strncmp(name, "numpy.", 6) == 0 && std::strcmp(name, "numpy.ndarray") != 0 &&
         std::strncmp(name, "numpy.complex", 13) != 0;
}

bool is_numpy_bool(PyObject* obj) {
  const char* name = Py_TYPE(obj)->tp_name;
  return std::strcmp(name, "numpy.bool_") == 0 || std::strcmp(name, "numpy.bool") == 0;
}

struct ScalarFromPython {
  ScalarFromPython() { cv::registry::push_back(&convertible, &construct, bp::type_id<Scalar>()); }
  static void* convertible(PyObject* obj) {
    if (PyLong_Check(obj) || PyFloat_Check(obj)) return obj;
    if (is_numpy_scalar(obj) && (PyIndex_Check(obj) || PyNumber_Check(obj))) return obj;
    return nullptr;
  }
  static void construct(PyObject* obj, cv::rvalue_from_python_stage1_data* data) {
    void* storage = reinterpret_cast<cv::rvalue_from_python_storage<Scalar>*>(data)->storage.bytes;
    Scalar s;
    if (!to_scalar(obj, &s)) bp::throw_error_already_set();
    new (storage) Scalar(s);
    data->convertible = storage;
  }
};

struct ScalarToPython {
  static PyObject* convert(const Scalar& s) { return bp::incref(scalar_to_python(s).ptr()); }
};

struct OptionalScalarFromPython {
  OptionalScalarFromPython() {
    cv::registry::push_back(&convertible, &construct, bp::type_id<std::optional<Scalar>>());
  }
  static void* convertible(PyObject* obj) {
    return obj == Py_None ? obj : ScalarFromPython::convertible(obj);
  }
  static void construct(PyObject* obj, cv::rvalue_from_python_stage1_data* data) {
    void* storage = reinterpret_cast<cv::rvalue_from_python_storage<std::optional<Scalar>>*>(data)
                        ->storage.bytes;
    std::optional<Scalar> value;
    if (obj != Py_None) {
      Scalar s;
      if (!to_scalar(obj, &s)) bp::throw_error_already_set();
      value = s;
    }
    new (storage) std::optional<Scalar>(value);
    data->convertible = storage;
  }
};

// ---- DType: a small class whose instances are the module's singletons.

struct PyDType {
  DType value;
};

PyObject* g_dtype_objects[kNumDTypes] = {};

std::string dtype_repr(const PyDType& d) { return std::string("kiln.") + dtype_name(d.value); }

bool dtype_from_object(PyObject* obj, DType* out) {
  if (void* p = cv::get_lvalue_from_python(obj, cv::registered<PyDType>::converters)) {
    *out = static_cast<PyDType*>(p)->value;
    return true;
  }
  if (obj == reinterpret_cast<PyObject*>(&PyFloat_Type)) {
    *out = DType::Float64;
    return true;
  }
  if (obj == reinterpret_cast<PyObject*>(&PyLong_Type)) {
    *out = DType::Int64;
    return true;
  }
  if (obj == reinterpret_cast<PyObject*>(&PyBool_Type)) {
    *out = DType::Bool;
    return true;
  }
  return false;
}

struct DTypeFromPython {
  DTypeFromPython() { cv::registry::push_back(&convertible, &construct, bp::type_id<DType>()); }
  static void* convertible(PyObject* obj) {
    DType d;
    return dtype_from_object(obj, &d) ? obj : nullptr;
  }
  static void construct(PyObject* obj, cv::rvalue_from_python_stage1_data* data) {
    void* storage = reinterpret_cast<cv::rvalue_from_python_storage<DType>*>(data)->storage.bytes;
    DType d = DType::Float32;
    dtype_from_object(obj, &d);
    new (storage) DType(d);
    data->convertible = storage;
  }
};

struct DTypeToPython {
  static PyObject* convert(DType d) { return bp::incref(g_dtype_objects[static_cast<int>(d)]); }
};

void register_dtypes() {
  bp::class_<PyDType>("dtype", "A tensor element type (kiln.float32, ...).", bp::no_init)
      .add_property(
          "itemsize", +[](const PyDType& d) { return itemsize(d.value); })
      .add_property(
          "is_floating_point", +[](const PyDType& d) { return is_floating(d.value); })
      .add_property(
          "is_signed", +[](const PyDType& d) { return d.value != DType::Bool; })
      .add_property(
          "name", +[](const PyDType& d) { return std::string(dtype_name(d.value)); })
      .def("__repr__", &dtype_repr)
      .def("__str__", &dtype_repr)
      .def(
          "__eq__", +[](const PyDType& a, const PyDType& b) { return a.value == b.value; })
      .def(
          "__ne__", +[](const PyDType& a, const PyDType& b) { return a.value != b.value; })
      .def(
          "__hash__", +[](const PyDType& d) { return static_cast<int64_t>(d.value) + 1000; })
      .def(
          "__reduce__", +[](const PyDType& d) {
            return bp::make_tuple(bp::import("kiln").attr("_dtype_by_name"),
                                  bp::make_tuple(std::string(dtype_name(d.value))));
          });
  for (int i = 0; i < kNumDTypes; ++i) {
    DType d = static_cast<DType>(i);
    bp::object obj(PyDType{d});
    g_dtype_objects[i] = bp::incref(obj.ptr());  // lives as long as the process
    bp::scope().attr(dtype_name(d)) = obj;
  }
  bp::to_python_converter<DType, DTypeToPython>();
  DTypeFromPython();
}

// ---- Device

bool device_from_object(PyObject* obj, Device* out) {
  if (void* p = cv::get_lvalue_from_python(obj, cv::registered<Device>::converters)) {
    *out = *static_cast<Device*>(p);
    return true;
  }
  if (PyUnicode_Check(obj)) {
    *out = Device::parse(bp::extract<std::string>(obj)());
    return true;
  }
  if (PyLong_Check(obj) && !PyBool_Check(obj)) {
    long index = PyLong_AsLong(obj);
    if (index == -1 && PyErr_Occurred()) bp::throw_error_already_set();
    KILN_CHECK(index >= 0, ValueError, "[device] a CUDA ordinal must be >= 0, got ", index);
    *out = cuda_device(static_cast<int>(index));
    return true;
  }
  if (std::strcmp(Py_TYPE(obj)->tp_name, "torch.device") == 0) {
    bp::object s(bp::handle<>(PyObject_Str(obj)));
    *out = Device::parse(bp::extract<std::string>(s)());
    return true;
  }
  return false;
}

struct DeviceFromPython {
  DeviceFromPython() { cv::registry::push_back(&convertible, &construct, bp::type_id<Device>()); }
  static void* convertible(PyObject* obj) {
    if (PyUnicode_Check(obj) || (PyLong_Check(obj) && !PyBool_Check(obj)) ||
        std::strcmp(Py_TYPE(obj)->tp_name, "torch.device") == 0)
      return obj;
    return nullptr;
  }
  static void construct(PyObject* obj, cv::rvalue_from_python_stage1_data* data) {
    void* storage = reinterpret_cast<cv::rvalue_from_python_storage<Device>*>(data)->storage.bytes;
    Device d;
    device_from_object(obj, &d);
    new (storage) Device(d);
    data->convertible = storage;
  }
};

std::shared_ptr<Device> make_device(const bp::object& spec, const bp::object& index) {
  Device d;
  if (!device_from_object(spec.ptr(), &d))
    throw DTypeError("[device] expected a string like 'cuda:0' or a device, got " +
                     type_name(spec));
  if (!index.is_none()) {
    KILN_CHECK(d.is_cuda(), ValueError, "[device] the CPU device takes no index");
    KILN_CHECK(spec.ptr() != nullptr && PyUnicode_Check(spec.ptr()) &&
                   bp::extract<std::string>(spec)().find(':') == std::string::npos,
               ValueError, "[device] give the index either in the string or as an argument");
    d = cuda_device(static_cast<int>(to_int(index.ptr(), "device", "index")));
  }
  return std::make_shared<Device>(d);
}

bp::object device_index(const Device& d) {
  return d.is_cuda() ? bp::object(d.index) : bp::object();
}

std::string device_repr(const Device& d) {
  if (d.is_cpu()) return "device(type='cpu')";
  return "device(type='cuda', index=" + std::to_string(d.index) + ")";
}

bp::object device_eq(const Device& a, const bp::object& other) {
  Device b;
  bool ok = false;
  try {
    ok = device_from_object(other.ptr(), &b);
  } catch (const Error&) {
    ok = false;
  }
  if (!ok) return bp::object(bp::handle<>(bp::borrowed(Py_NotImplemented)));
  return bp::object(a == b);
}

void register_devices() {
  bp::class_<Device, std::shared_ptr<Device>>(
      "device", "Where a tensor lives: kiln.device('cpu'), kiln.device('cuda:0').", bp::no_init)
      .def("__init__", bp::make_constructor(&make_device, bp::default_call_policies(),
                                            (bp::arg("type"), bp::arg("index") = bp::object())))
      .add_property(
          "type", +[](const Device& d) { return std::string(d.is_cpu() ? "cpu" : "cuda"); })
      .add_property("index", &device_index)
      .def("__str__", &Device::str)
      .def("__repr__", &device_repr)
      .def("__eq__", &device_eq)
      .def(
          "__ne__",
          +[](const Device& a, const bp::object& other) {
            bp::object r = device_eq(a, other);
            if (r.ptr() == Py_NotImplemented) return r;
            return bp::object(!bp::extract<bool>(r)());
          })
      .def(
          "__hash__",
          +[](const Device& d) { return static_cast<int64_t>(d.type) * 1024 + d.index; });
  DeviceFromPython();
}

// ---- Dims, int lists, tensor lists

bool is_int_sequence(PyObject* obj) {
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  PyObject** items = PySequence_Fast_ITEMS(obj);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (PyFloat_Check(items[i]) || !PyIndex_Check(items[i]) || is_tensor(items[i])) return false;
  }
  return true;
}

template <class Seq>
void fill_ints(PyObject* obj, Seq* out) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  PyObject** items = PySequence_Fast_ITEMS(obj);
  for (Py_ssize_t i = 0; i < n; ++i) out->push_back(to_int(items[i], "sizes", "element"));
}

template <class Seq>
struct IntSequenceFromPython {
  IntSequenceFromPython() { cv::registry::push_back(&convertible, &construct, bp::type_id<Seq>()); }
  static void* convertible(PyObject* obj) { return is_int_sequence(obj) ? obj : nullptr; }
  static void construct(PyObject* obj, cv::rvalue_from_python_stage1_data* data) {
    void* storage = reinterpret_cast<cv::rvalue_from_python_storage<Seq>*>(data)->storage.bytes;
    Seq* seq = new (storage) Seq();
    data->convertible = storage;
    fill_ints(obj, seq);
  }
};

struct DimsToPython {
  static PyObject* convert(const Dims& d) {
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(d.size()));
    for (size_t i = 0; i < d.size(); ++i)
      PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(d[i]));
    return t;
  }
};

struct TensorListFromPython {
  TensorListFromPython() {
    cv::registry::push_back(&convertible, &construct, bp::type_id<std::vector<Tensor>>());
  }
  static void* convertible(PyObject* obj) {
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) return nullptr;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    PyObject** items = PySequence_Fast_ITEMS(obj);
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!is_tensor(items[i])) return nullptr;
    return obj;
  }
  static void construct(PyObject* obj, cv::rvalue_from_python_stage1_data* data) {
    void* storage =
        reinterpret_cast<cv::rvalue_from_python_storage<std::vector<Tensor>>*>(data)->storage.bytes;
    auto* v = new (storage) std::vector<Tensor>();
    data->convertible = storage;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    PyObject** items = PySequence_Fast_ITEMS(obj);
    v->reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) v->push_back(tensor_of(items[i]));
  }
};

struct TensorListToPython {
  static PyObject* convert(const std::vector<Tensor>& ts) {
    return bp::incref(tensor_tuple(ts).ptr());
  }
};

}  // namespace

// ---- helpers shared by the other files

bool is_number(PyObject* obj) { return ScalarFromPython::convertible(obj) != nullptr; }

bool to_scalar(PyObject* obj, Scalar* out) {
  if (PyBool_Check(obj)) {
    *out = Scalar(obj == Py_True);
    return true;
  }
  if (PyLong_Check(obj)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) {
      PyErr_SetString(PyExc_OverflowError, "Python int too large for a kiln scalar (int64)");
      return false;
    }
    if (v == -1 && PyErr_Occurred()) return false;
    *out = Scalar(static_cast<int64_t>(v));
    return true;
  }
  if (PyFloat_Check(obj)) {
    *out = Scalar(PyFloat_AS_DOUBLE(obj));
    return true;
  }
  if (is_numpy_scalar(obj)) {
    if (is_numpy_bool(obj)) {
      int truth = PyObject_IsTrue(obj);
      if (truth < 0) return false;
      *out = Scalar(truth != 0);
      return true;
    }
    if (PyIndex_Check(obj)) {
      bp::object i(bp::handle<>(bp::allow_null(PyNumber_Index(obj))));
      if (!i.ptr()) return false;
      return to_scalar(i.ptr(), out);
    }
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred()) return false;
    *out = Scalar(v);
    return true;
  }
  PyErr_Format(PyExc_TypeError, "expected a number, got %s", Py_TYPE(obj)->tp_name);
  return false;
}

bp::object scalar_to_python(const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool:
      return bp::object(bp::handle<>(PyBool_FromLong(s.to<bool>())));
    case Scalar::Kind::Int:
      return bp::object(bp::handle<>(PyLong_FromLongLong(s.to_int())));
    case Scalar::Kind::Float:
      break;
  }
  return bp::object(bp::handle<>(PyFloat_FromDouble(s.to_double())));
}

std::string type_name(PyObject* obj) { return Py_TYPE(obj)->tp_name; }
std::string type_name(const bp::object& obj) { return type_name(obj.ptr()); }

int64_t to_int(PyObject* obj, const char* op, const char* arg) {
  if (PyLong_Check(obj) && !PyBool_Check(obj)) {
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) bp::throw_error_already_set();
    return v;
  }
  if (PyFloat_Check(obj) || PyBool_Check(obj) || !PyIndex_Check(obj))
    throw DTypeError(detail::cat("[", op, "] ", arg, " must be an int, got ", type_name(obj)));
  bp::object i(bp::handle<>(PyNumber_Index(obj)));
  long long v = PyLong_AsLongLong(i.ptr());
  if (v == -1 && PyErr_Occurred()) bp::throw_error_already_set();
  return v;
}

Dims to_dims(const bp::object& obj, const char* op, const char* arg, bool allow_none) {
  Dims dims;
  PyObject* p = obj.ptr();
  if (allow_none && p == Py_None) return dims;
  if (PyTuple_Check(p) || PyList_Check(p)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(p);
    PyObject** items = PySequence_Fast_ITEMS(p);
    for (Py_ssize_t i = 0; i < n; ++i) dims.push_back(to_int(items[i], op, arg));
    return dims;
  }
  if (PyIndex_Check(p) && !PyFloat_Check(p) && !PyBool_Check(p) && !is_tensor(p)) {
    dims.push_back(to_int(p, op, arg));
    return dims;
  }
  throw DTypeError(
      detail::cat("[", op, "] ", arg, " must be an int or a tuple of ints, got ", type_name(p)));
}

Dims sizes_from_args(const bp::tuple& args, int first, const char* op) {
  Py_ssize_t n = PyTuple_GET_SIZE(args.ptr());
  if (n == first + 1) {
    PyObject* only = PyTuple_GET_ITEM(args.ptr(), first);
    if (PyTuple_Check(only) || PyList_Check(only))
      return to_dims(bp::object(bp::handle<>(bp::borrowed(only))), op, "size");
  }
  Dims dims;
  for (Py_ssize_t i = first; i < n; ++i)
    dims.push_back(to_int(PyTuple_GET_ITEM(args.ptr(), i), op, "size"));
  return dims;
}

std::array<int64_t, 2> to_pair(const bp::object& obj, const char* op, const char* arg) {
  Dims d = to_dims(obj, op, arg);
  if (d.size() == 1) return {d[0], d[0]};
  KILN_CHECK(d.size() == 2, ValueError, "[", op, "] ", arg,
             " must be an int or a pair of ints, got ", d.size(), " values");
  return {d[0], d[1]};
}

bp::tuple tensor_tuple(const std::vector<Tensor>& ts) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(ts.size()));
  if (!t) bp::throw_error_already_set();
  bp::tuple result{bp::handle<>(t)};
  for (size_t i = 0; i < ts.size(); ++i)
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), bp::incref(bp::object(ts[i]).ptr()));
  return result;
}

void register_converters() {
  ScalarFromPython();
  bp::to_python_converter<Scalar, ScalarToPython>();
  OptionalScalarFromPython();
  register_dtypes();
  register_devices();
  IntSequenceFromPython<Dims>();
  IntSequenceFromPython<std::vector<int64_t>>();
  bp::to_python_converter<Dims, DimsToPython>();
  TensorListFromPython();
  bp::to_python_converter<std::vector<Tensor>, TensorListToPython>();
}

}  // namespace kiln::python
