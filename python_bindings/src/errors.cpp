// kiln's C++ errors as Python exceptions. Every class derives from kiln.KilnError
// (so users can catch all of kiln's errors at once) and from the builtin Python users
// expect for that kind of failure:
//
//   kiln::ShapeError       -> kiln.ShapeError        (KilnError, ValueError)
//   kiln::ValueError       -> kiln.KilnValueError    (KilnError, ValueError)
//   kiln::DTypeError       -> kiln.DTypeError        (KilnError, TypeError)
//   kiln::IndexError       -> kiln.KilnIndexError    (KilnError, IndexError)
//   kiln::DeviceError      -> kiln.DeviceError       (KilnError, RuntimeError)
//   kiln::OutOfMemoryError -> kiln.OutOfMemoryError  (KilnError, RuntimeError)
//   kiln::BackendError     -> kiln.BackendError      (KilnError, RuntimeError)
//   kiln::Error (other)    -> kiln.KilnRuntimeError  (KilnError, RuntimeError)
//
// The message is the C++ what() unchanged ("[reshape] cannot reshape ...").
// kiln::GraphBreakError -> kiln.GraphBreakError (KilnError, RuntimeError), its class
// made by tracer_api.cpp.
#include "common.h"
#include "tracer/api.h"

namespace kiln::python {
namespace {

struct ErrorClass {
  const char* name;  // attribute name in the module
  PyObject* builtin;
  PyObject* type = nullptr;
};

PyObject* g_kiln_error = nullptr;

PyObject* make_class(const char* name, PyObject* base_a, PyObject* base_b, const char* doc) {
  std::string qualified = std::string("kiln.") + name;
  PyObject* bases = base_b ? PyTuple_Pack(2, base_a, base_b) : PyTuple_Pack(1, base_a);
  if (!bases) bp::throw_error_already_set();
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!type) bp::throw_error_already_set();
  bp::scope().attr(name) = bp::object(bp::handle<>(bp::borrowed(type)));
  return type;
}

// One translator for every kiln error, the most specific Python class first. Boost.Python
// wraps each call of a bound function in one handler per registered translator, so one
// translator instead of one per class keeps that per-call cost flat.
struct ErrorClasses {
  PyObject* error = nullptr;  // plain kiln::Error
  PyObject* shape = nullptr;
  PyObject* value = nullptr;
  PyObject* dtype = nullptr;
  PyObject* index = nullptr;
  PyObject* device = nullptr;
  PyObject* out_of_memory = nullptr;
  PyObject* backend = nullptr;
  PyObject* graph_break = nullptr;
} g_classes;

PyObject* python_class_of(const Error& e) {
  if (dynamic_cast<const ShapeError*>(&e)) return g_classes.shape;
  if (dynamic_cast<const ValueError*>(&e)) return g_classes.value;
  if (dynamic_cast<const DTypeError*>(&e)) return g_classes.dtype;
  if (dynamic_cast<const IndexError*>(&e)) return g_classes.index;
  if (dynamic_cast<const DeviceError*>(&e)) return g_classes.device;
  if (dynamic_cast<const OutOfMemoryError*>(&e)) return g_classes.out_of_memory;
  if (dynamic_cast<const BackendError*>(&e)) return g_classes.backend;
  if (g_classes.graph_break && dynamic_cast<const GraphBreakError*>(&e))
    return g_classes.graph_break;
  return g_classes.error;
}

}  // namespace

void set_graph_break_error_class(PyObject* type) { g_classes.graph_break = type; }

void register_errors() {
  g_kiln_error =
      make_class("KilnError", PyExc_Exception, nullptr, "Base class of every error kiln raises.");
  g_classes.error = make_class("KilnRuntimeError", g_kiln_error, PyExc_RuntimeError,
                               "A kiln error with no more specific class.");
  g_classes.shape =
      make_class("ShapeError", g_kiln_error, PyExc_ValueError, "Bad shapes or sizes.");
  g_classes.value =
      make_class("KilnValueError", g_kiln_error, PyExc_ValueError, "Bad argument values.");
  g_classes.dtype = make_class("DTypeError", g_kiln_error, PyExc_TypeError,
                               "Unsupported dtype or argument type.");
  g_classes.index =
      make_class("KilnIndexError", g_kiln_error, PyExc_IndexError, "Dim or index out of range.");
  g_classes.device = make_class("DeviceError", g_kiln_error, PyExc_RuntimeError,
                                "Tensors on different devices, or no such device.");
  g_classes.out_of_memory = make_class("OutOfMemoryError", g_kiln_error, PyExc_RuntimeError,
                                       "A host or device allocation failed.");
  g_classes.backend = make_class("BackendError", g_kiln_error, PyExc_RuntimeError,
                                 "A CUDA, BLAS or compiler call failed.");
  bp::register_exception_translator<Error>(
      [](const Error& e) { PyErr_SetString(python_class_of(e), e.what()); });
}

}  // namespace kiln::python
