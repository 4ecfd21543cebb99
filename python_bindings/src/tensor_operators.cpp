// The per-op path from Python for kiln.Tensor's arithmetic operators (+ - * / @): the
// number slots of the Tensor type call the C++ operators directly when both operands
// are tensors, or one is a tensor and the other a Python number, instead of going
// through the bound __add__ (slot lookup, a bound method, Boost.Python's overload
// resolution and argument converters). The result is the same value and the same
// errors (kiln errors raised as their Python classes); every other operand takes the
// bound methods, as before (`t + ndarray`, subclasses that define their own operators).
//
// tensor_of's fast form lives here too: the Tensor held by a kiln.Tensor object, read
// from the instance's holder without a converter-registry lookup.
#include <typeinfo>

#include "common.h"

namespace kiln::python {
namespace {

using Holder = bp::objects::value_holder<Tensor>;
using Instance = bp::objects::instance<Holder>;

// Where a Holder keeps its Tensor (measured once: Holder's member is private).
std::ptrdiff_t g_held_offset = -1;

PyObject* wrap(const Tensor& t) {
  return bp::objects::make_instance<Tensor, Holder>::execute(boost::cref(t));
}

// a or b's bound special method (`name` on a's type), as the type's generic slot would
// call it: NotImplemented if there is none.
PyObject* call_special(PyObject* self, PyObject* name, PyObject* other) {
  PyObject* method = _PyType_Lookup(Py_TYPE(self), name);  // borrowed
  if (!method) Py_RETURN_NOTIMPLEMENTED;
  return PyObject_CallFunctionObjArgs(method, self, other, nullptr);
}

// The generic form: a.__op__(b), then b.__rop__(a) (the slot's semantics for operands
// the fast form does not take).
PyObject* generic(PyObject* a, PyObject* b, PyObject* name, PyObject* rname) {
  if (is_tensor(a)) {
    PyObject* r = call_special(a, name, b);
    if (r != Py_NotImplemented || !is_tensor(b) || Py_TYPE(a) == Py_TYPE(b) || !rname) return r;
    Py_DECREF(r);
    return call_special(b, rname, a);
  }
  if (rname && is_tensor(b)) return call_special(b, rname, a);
  Py_RETURN_NOTIMPLEMENTED;
}

// A Python number (bool, int, float, numpy scalar) as a Scalar; false, with no Python
// error left, if obj is none.
bool number(PyObject* obj, Scalar* out) {
  if (!PyFloat_CheckExact(obj) && !PyLong_CheckExact(obj) && !is_number(obj)) return false;
  if (to_scalar(obj, out)) return true;
  PyErr_Clear();  // the bound method reports it
  return false;
}

struct Names {
  PyObject* op;
  PyObject* rop;  // null: no reflected form (@ takes tensors only)
};

// One binary operator: TT (tensor, tensor), TS (tensor, number), ST (number, tensor).
template <class TT, class TS, class ST>
PyObject* binary(PyObject* a, PyObject* b, const Names& names, TT tt, TS ts, ST st) {
  try {
    const Tensor* x = fast_tensor_of(a);
    const Tensor* y = fast_tensor_of(b);
    Scalar s;
    if (x && y) return wrap(tt(*x, *y));
    if (x && number(b, &s)) return wrap(ts(*x, s));
    if (y && number(a, &s)) return wrap(st(s, *y));
  } catch (...) {
    bp::handle_exception();
    return nullptr;
  }
  return generic(a, b, names.op, names.rop);
}

Names g_add, g_sub, g_mul, g_div, g_matmul;

PyObject* nb_add(PyObject* a, PyObject* b) {
  return binary(
      a, b, g_add, [](const Tensor& x, const Tensor& y) { return x + y; },
      [](const Tensor& x, const Scalar& s) { return x + s; },
      [](const Scalar& s, const Tensor& y) { return s + y; });
}
PyObject* nb_subtract(PyObject* a, PyObject* b) {
  return binary(
      a, b, g_sub, [](const Tensor& x, const Tensor& y) { return x - y; },
      [](const Tensor& x, const Scalar& s) { return x - s; },
      [](const Scalar& s, const Tensor& y) { return s - y; });
}
PyObject* nb_multiply(PyObject* a, PyObject* b) {
  return binary(
      a, b, g_mul, [](const Tensor& x, const Tensor& y) { return x * y; },
      [](const Tensor& x, const Scalar& s) { return x * s; },
      [](const Scalar& s, const Tensor& y) { return s * y; });
}
PyObject* nb_true_divide(PyObject* a, PyObject* b) {
  return binary(
      a, b, g_div, [](const Tensor& x, const Tensor& y) { return x / y; },
      [](const Tensor& x, const Scalar& s) { return x / s; },
      [](const Scalar& s, const Tensor& y) { return s / y; });
}
PyObject* nb_matrix_multiply(PyObject* a, PyObject* b) {
  try {
    const Tensor* x = fast_tensor_of(a);
    const Tensor* y = fast_tensor_of(b);
    if (x && y) return wrap(kiln::matmul(*x, *y));
  } catch (...) {
    bp::handle_exception();
    return nullptr;
  }
  return generic(a, b, g_matmul.op, g_matmul.rop);
}

Names names(const char* op, const char* rop) {
  return Names{PyUnicode_InternFromString(op), rop ? PyUnicode_InternFromString(rop) : nullptr};
}

}  // namespace

const Tensor* fast_tensor_of(PyObject* obj) {
  if (Py_TYPE(obj) != reinterpret_cast<PyTypeObject*>(tensor_type()) || g_held_offset < 0)
    return nullptr;
  bp::instance_holder* holder = reinterpret_cast<Instance*>(obj)->objects;
  if (!holder || typeid(*holder) != typeid(Holder)) return nullptr;
  return reinterpret_cast<const Tensor*>(reinterpret_cast<const char*>(holder) + g_held_offset);
}

void install_tensor_operators() {
  // The holder's layout, from a real instance.
  const Tensor empty;
  bp::object probe{bp::handle<>(wrap(empty))};
  bp::instance_holder* holder = reinterpret_cast<Instance*>(probe.ptr())->objects;
  void* held = holder->holds(bp::type_id<Tensor>(), false);
  g_held_offset = reinterpret_cast<char*>(held) - reinterpret_cast<char*>(holder);

  g_add = names("__add__", "__radd__");
  g_sub = names("__sub__", "__rsub__");
  g_mul = names("__mul__", "__rmul__");
  g_div = names("__truediv__", "__rtruediv__");
  g_matmul = names("__matmul__", nullptr);
  // Set after the bound methods: defining __add__ on the type resets its slot. Setting
  // Tensor.__add__ again from Python would too (that operator then takes the bound path).
  PyNumberMethods* number_slots = reinterpret_cast<PyTypeObject*>(tensor_type())->tp_as_number;
  number_slots->nb_add = &nb_add;
  number_slots->nb_subtract = &nb_subtract;
  number_slots->nb_multiply = &nb_multiply;
  number_slots->nb_true_divide = &nb_true_divide;
  number_slots->nb_matrix_multiply = &nb_matrix_multiply;
  PyType_Modified(reinterpret_cast<PyTypeObject*>(tensor_type()));
}

}  // namespace kiln::python
