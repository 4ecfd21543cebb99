// Shared pieces of the _kiln extension (Boost.Python over the C++ API in ops/api.h).
//
// The extension is split by concern so rebuilds stay incremental:
//   module.cpp        BOOST_PYTHON_MODULE, the op table, RNG, CUDA queries
//   errors.cpp        kiln errors -> Python exception classes (KilnError + builtin)
//   converters.cpp    Scalar, DType, Device, Dims, tensor lists <-> Python objects
//   tensor_class.cpp  class Tensor: metadata, views, conversions, operators, in place
//   tensor_operators.cpp the number slots of + - * / @ (the per-op path from Python)
//   tensor_index.cpp  __getitem__ / __setitem__ (ints, slices, None, ..., tensors)
//   ops.cpp           module-level op functions; unary/binary ones generated from
//                     the op table (ops/ops.def), the rest bound one by one
//   ops_along_dim.cpp gather / scatter / sort / topk / cumsum / prod functions
//   ops_sample.cpp    multinomial, nonzero, masked_select
//   interop.cpp       __array_interface__, from_numpy, DLPack export and import
//   site.cpp          the tracer's site provider (exact Python sites, their words)
//   python_frames.cpp reading the Python stack without frame objects (CPython 3.11)
//   tracer_api.cpp    regions, explain(), reset(), tracer settings, GraphBreakError
//   autograd_api.cpp  requires_grad / grad / backward, grad mode, autograd.grad,
//                     checkpoint, losses, the optimizers' C++ cores
//   distributed_api.cpp process groups and DDP's gradient reducer (kiln.distributed)
//   module_getattr.cpp kiln.nn.Module's attribute lookup in C
// The pure-Python package (python_bindings/kiln) adds PyTorch spellings on top.
#pragma once

// Python.h must come first (it sets feature macros the C library headers read).
#include <boost/python.hpp>

#include <optional>
#include <string>
#include <vector>

#include "ops/api.h"
#include "ops/dispatch.h"
#include "runtime/error.h"

namespace kiln::python {

namespace bp = boost::python;

void register_errors();
// The Python class of tracer::GraphBreakError (tracer_api.cpp makes it; errors.cpp raises it).
void set_graph_break_error_class(PyObject* type);
void register_converters();
void register_tensor_class();
void register_tensor_index();
void register_ops();
void register_along_dim_ops();  // ops_along_dim.cpp
void register_sample_ops();     // ops_sample.cpp
void register_recurrent_ops();  // ops_recurrent.cpp
void register_interop();
void register_site();
void register_tracer();
void register_profiler();
void register_autograd();
void register_hooks();           // hooks_api.cpp, called by register_autograd
void register_distributed();     // distributed_api.cpp
void register_module_getattr();  // module_getattr.cpp

// Drops a reference kiln holds to a Python object (a numpy array behind from_numpy, a
// DLPack capsule's producer, a checkpointed callable), under the GIL. Also while the
// interpreter shuts down (Py_IsInitialized() is already false while module globals
// are cleared, which is when most tensors go); left alone only once Py_FinalizeEx has
// finished (its Py_AtExit step), when thread-local destructors (the main thread's
// tracer state) run and a Py_DECREF would be fatal. f runs with the GIL held.
bool python_objects_releasable();
template <class F>
void with_gil_if_releasable(F&& f) {
  if (!python_objects_releasable()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  f();
  PyGILState_Release(gil);
}
void note_python_alive();
// A strong reference to a Python callable that an autograd node keeps (released under
// the GIL, or left alone after the interpreter is gone; autograd_api.cpp).
std::shared_ptr<PyObject> hold_callable(
    const bp::object& fn);  // BOOST_PYTHON_MODULE: installs the Py_AtExit step

// The Python class object of kiln.Tensor (set by register_tensor_class).
PyObject* tensor_type();
inline bool is_tensor(PyObject* obj) {
  return PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(tensor_type()));
}
// The Tensor held by a kiln.Tensor object (obj must be one: see is_tensor).
const Tensor& tensor_of(PyObject* obj);
// The same for an object of exactly the kiln.Tensor type, read straight from its holder;
// null for anything else (tensor_operators.cpp).
const Tensor* fast_tensor_of(PyObject* obj);
// Installs the Tensor type's fast number slots (+ - * / @); after its bound methods.
void install_tensor_operators();

// Python number (bool, int, float, numpy scalar) -> Scalar; false (a Python error set)
// if obj is none.
bool is_number(PyObject* obj);
bool to_scalar(PyObject* obj, Scalar* out);
bp::object scalar_to_python(const Scalar& s);

// An int or a sequence of ints -> Dims. None -> empty dims when allow_none.
Dims to_dims(const bp::object& obj, const char* op, const char* arg, bool allow_none = false);
// A sequence of ints (or one int) -> Dims, for sizes given as varargs or one tuple:
// args[first:] is either (n0, n1, ...) or ((n0, n1, ...),).
Dims sizes_from_args(const bp::tuple& args, int first, const char* op);
// An int or a pair of ints (conv stride, pool kernel) -> {a, b}.
std::array<int64_t, 2> to_pair(const bp::object& obj, const char* op, const char* arg);
// Python index (int-like, not bool) -> int64; throws DTypeError naming op and arg.
int64_t to_int(PyObject* obj, const char* op, const char* arg);

// The Python type name of obj, for error messages.
std::string type_name(PyObject* obj);
std::string type_name(const bp::object& obj);

// Builds a tuple of Tensors.
bp::tuple tensor_tuple(const std::vector<Tensor>& ts);

}  // namespace kiln::python
