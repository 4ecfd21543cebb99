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
#include "common.h"

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

template <class E>
void register_translator(PyObject* type) {
  bp::register_exception_translator<E>([type](const E& e) { PyErr_SetString(type, e.what()); });
}

}  // namespace

void register_errors() {
  g_kiln_error =
      make_class("KilnError", PyExc_Exception, nullptr, "Base class of every error kiln raises.");
  // Plain kiln::Error first: Boost.Python tries the translators registered last
  // first, so the specific classes below win over this catch-all.
  register_translator<Error>(make_class("KilnRuntimeError", g_kiln_error, PyExc_RuntimeError,
                                        "A kiln error with no more specific class."));
  register_translator<ShapeError>(
      make_class("ShapeError", g_kiln_error, PyExc_ValueError, "Bad shapes or sizes."));
  register_translator<ValueError>(
      make_class("KilnValueError", g_kiln_error, PyExc_ValueError, "Bad argument values."));
  register_translator<DTypeError>(make_class("DTypeError", g_kiln_error, PyExc_TypeError,
                                             "Unsupported dtype or argument type."));
  register_translator<IndexError>(
      make_class("KilnIndexError", g_kiln_error, PyExc_IndexError, "Dim or index out of range."));
  register_translator<DeviceError>(make_class("DeviceError", g_kiln_error, PyExc_RuntimeError,
                                              "Tensors on different devices, or no such device."));
  register_translator<OutOfMemoryError>(make_class(
      "OutOfMemoryError", g_kiln_error, PyExc_RuntimeError, "A host or device allocation failed."));
  register_translator<BackendError>(make_class("BackendError", g_kiln_error, PyExc_RuntimeError,
                                               "A CUDA, BLAS or compiler call failed."));
}

}  // namespace kiln::python
