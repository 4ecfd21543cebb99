// Python's ways into a backward pass: Tensor.register_hook (a Python callable on a
// tensor's gradient, ops/autograd/hooks.h) and custom backward functions (kiln.autograd.
// Function and the module backward hooks of kiln.nn are built on _record_function).
#include "common.h"
#include "ops/autograd/hooks.h"

namespace kiln::python {
namespace {

bp::object tensor_or_none(const Tensor& t) { return t.defined() ? bp::object(t) : bp::object(); }

// A Python result that must be a kiln.Tensor or None (-> undefined).
Tensor tensor_result(const bp::object& r, const char* op, const char* what) {
  if (r.is_none()) return {};
  KILN_CHECK(is_tensor(r.ptr()), DTypeError, "[", op, "] ", what,
             " must return a kiln.Tensor or None, got ", type_name(r));
  return tensor_of(r.ptr());
}

autograd::HookHandle register_hook_fn(const Tensor& t, const bp::object& hook) {
  KILN_CHECK(PyCallable_Check(hook.ptr()), DTypeError,
             "[register_hook] hook must be callable, got ", type_name(hook));
  auto fn = [h = hold_callable(hook)](const Tensor& g) {
    bp::object r(bp::handle<>(PyObject_CallFunctionObjArgs(h.get(), bp::object(g).ptr(), nullptr)));
    return tensor_result(r, "register_hook", "a hook");
  };
  return autograd::register_hook(t, fn);
}

// backward(grads: tuple of Tensor or None, one per output) -> sequence of Tensor or None,
// one per input.
bp::list record_function_fn(const std::string& name, const bp::object& backward,
                            const bp::object& inputs, const bp::object& outputs,
                            const bp::object& differentiable) {
  std::vector<Tensor> ins, outs;
  std::vector<bool> diff;
  for (Py_ssize_t i = 0, n = bp::len(inputs); i < n; ++i) {
    bp::object x = inputs[i];
    ins.push_back(x.is_none() ? Tensor() : bp::extract<Tensor>(x)());
  }
  for (Py_ssize_t i = 0, n = bp::len(outputs); i < n; ++i)
    outs.push_back(bp::extract<Tensor>(outputs[i])());
  for (Py_ssize_t i = 0, n = bp::len(differentiable); i < n; ++i)
    diff.push_back(bp::extract<bool>(differentiable[i])());
  const size_t n_in = ins.size();
  auto fn = [b = hold_callable(backward), name, n_in](const TensorList& grads) {
    bp::list gs;
    for (const Tensor& g : grads) gs.append(tensor_or_none(g));
    bp::object r(bp::handle<>(PyObject_CallFunctionObjArgs(b.get(), bp::tuple(gs).ptr(), nullptr)));
    const Py_ssize_t n = PyObject_Length(r.ptr());
    if (n < 0) bp::throw_error_already_set();
    KILN_CHECK(static_cast<size_t>(n) == n_in, Error, "[", name, "] backward returned ", n,
               " gradients, expected ", n_in);
    TensorList out;
    for (Py_ssize_t i = 0; i < n; ++i) out.push_back(tensor_result(r[i], name.c_str(), "backward"));
    return out;
  };
  bp::list result;
  for (const Tensor& t : autograd::record_function(name, fn, ins, outs, diff)) result.append(t);
  return result;
}

}  // namespace

void register_hooks() {
  bp::class_<autograd::HookHandle>("_HookHandle", bp::no_init)
      .def("remove", &autograd::HookHandle::remove);
  bp::def("_register_hook", &register_hook_fn);
  bp::def("_record_function", &record_function_fn);
}

}  // namespace kiln::python
