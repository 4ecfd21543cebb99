// Autograd from Python: Tensor.requires_grad / grad / backward / retain_grad, grad
// mode, kiln.autograd.grad, kiln.utils.checkpoint (the segment is a Python callable),
// binary_cross_entropy_with_logits, and the C++ optimizers behind kiln.optim.
#include "common.h"
#include "ops/autograd/checkpoint.h"
#include "ops/autograd/engine.h"
#include "ops/autograd/grad_mode.h"
#include "ops/losses.h"
#include "ops/optim/optimizer.h"

namespace kiln::python {
namespace {

bp::object tensor_or_none(const Tensor& t) { return t.defined() ? bp::object(t) : bp::object(); }

// A Python sequence of tensors or None -> tensors (None -> undefined).
std::vector<Tensor> optional_tensors(const bp::object& seq, const char* op, const char* arg) {
  std::vector<Tensor> out;
  if (seq.is_none()) return out;
  if (is_tensor(seq.ptr())) return {tensor_of(seq.ptr())};
  const Py_ssize_t n = PyObject_Length(seq.ptr());
  if (n < 0) bp::throw_error_already_set();
  for (Py_ssize_t i = 0; i < n; ++i) {
    bp::object item = seq[i];
    if (item.is_none()) {
      out.emplace_back();
      continue;
    }
    KILN_CHECK(is_tensor(item.ptr()), DTypeError, "[", op, "] ", arg,
               " must hold kiln.Tensors or None, got ", type_name(item));
    out.push_back(tensor_of(item.ptr()));
  }
  return out;
}

bp::list tensor_list(const std::vector<Tensor>& ts) {
  bp::list out;
  for (const Tensor& t : ts) out.append(tensor_or_none(t));
  return out;
}

Tensor requires_grad_m(Tensor t, bool flag) { return t.set_requires_grad(flag); }
bp::object grad_of(const Tensor& t) { return tensor_or_none(t.grad()); }
void set_grad(Tensor t, const bp::object& g) {
  t.set_grad(g.is_none() ? Tensor() : bp::extract<Tensor>(g)());
}
void retain_grad_m(Tensor t) { t.retain_grad(); }
// Tensor.data: detach() without sharing the version counter (PyTorch's .data: writes
// through it are not seen by autograd's saved-value check).
Tensor data_of(const Tensor& t) {
  Tensor d = t.detach();
  d.impl()->shared_version.reset();
  d.impl()->own_version = 0;
  return d;
}
void backward_m(const Tensor& t, const bp::object& grad, bool retain_graph) {
  t.backward(grad.is_none() ? Tensor() : bp::extract<Tensor>(grad)(), retain_graph);
}

void autograd_backward(const bp::object& roots, const bp::object& grads, bool retain_graph) {
  autograd::backward(optional_tensors(roots, "backward", "tensors"),
                     optional_tensors(grads, "backward", "grad_tensors"), retain_graph);
}

bp::list autograd_grad(const bp::object& roots, const bp::object& inputs, const bp::object& grads,
                       bool retain_graph, bool allow_unused) {
  return tensor_list(autograd::grad(
      optional_tensors(roots, "grad", "outputs"), optional_tensors(inputs, "grad", "inputs"),
      optional_tensors(grads, "grad", "grad_outputs"), retain_graph, allow_unused));
}

// fn(*tensors) -> a tensor or a tuple/list of tensors.
bp::list checkpoint_fn(const bp::object& fn_obj, const bp::object& tensors) {
  auto segment = [fn = hold_callable(fn_obj)](const std::vector<Tensor>& inputs) {
    bp::tuple args = tensor_tuple(inputs);
    bp::object result(bp::handle<>(PyObject_CallObject(fn.get(), args.ptr())));
    if (is_tensor(result.ptr())) return std::vector<Tensor>{tensor_of(result.ptr())};
    std::vector<Tensor> out = optional_tensors(result, "checkpoint", "the segment's result");
    for (const Tensor& t : out)
      KILN_CHECK(t.defined(), DTypeError,
                 "[checkpoint] the checkpointed function must return tensors");
    return out;
  };
  return tensor_list(
      autograd::checkpoint(segment, optional_tensors(tensors, "checkpoint", "inputs")));
}

Tensor bce_with_logits(const Tensor& input, const Tensor& target, const std::string& reduction) {
  return binary_cross_entropy_with_logits(input, target, reduction);
}

// ---- optimizers: the Python classes in kiln/optim.py hold one per parameter group.

std::shared_ptr<optim::SGD> make_sgd(const std::vector<Tensor>& params, double lr, double momentum,
                                     double dampening, double weight_decay, bool nesterov,
                                     bool maximize) {
  return std::make_shared<optim::SGD>(
      params, optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov, maximize});
}

std::shared_ptr<optim::Adam> make_adam(const std::vector<Tensor>& params, double lr, double beta1,
                                       double beta2, double eps, double weight_decay, bool amsgrad,
                                       bool maximize, bool decoupled) {
  optim::AdamOptions o{lr, beta1, beta2, eps, weight_decay, amsgrad, maximize};
  if (decoupled) return std::make_shared<optim::AdamW>(params, o);
  return std::make_shared<optim::Adam>(params, o);
}

bp::list momentum_buffers(const optim::SGD& o) { return tensor_list(o.momentum_buffers()); }
bp::list exp_avg(const optim::Adam& o) { return tensor_list(o.exp_avg()); }
bp::list exp_avg_sq(const optim::Adam& o) { return tensor_list(o.exp_avg_sq()); }

}  // namespace

// The callable kept by an autograd node (a checkpointed segment, a hook, a custom
// function's backward). A node can outlive the interpreter: the main thread's Tracer
// (a thread_local) holds the tensors it recorded, with their history, until exit()
// runs the thread-local destructors, after Py_Finalize, where a Py_DECREF is fatal
// ("the GIL is released"). The reference is dropped under the GIL while Python runs,
// and left alone once it is gone (see with_gil_if_releasable).
std::shared_ptr<PyObject> hold_callable(const bp::object& fn) {
  Py_INCREF(fn.ptr());
  return std::shared_ptr<PyObject>(
      fn.ptr(), [](PyObject* p) { with_gil_if_releasable([&] { Py_DECREF(p); }); });
}

void register_autograd() {
  bp::def("_requires_grad_", &requires_grad_m, (bp::arg("self"), bp::arg("requires_grad") = true));
  bp::def(
      "_tensor_requires_grad", +[](const Tensor& t) { return t.requires_grad(); });
  bp::def(
      "_tensor_is_leaf", +[](const Tensor& t) { return t.is_leaf(); });
  bp::def("_tensor_grad", &grad_of);
  bp::def("_tensor_set_grad", &set_grad);
  bp::def(
      "_tensor_grad_fn_name", +[](const Tensor& t) { return t.grad_fn_name(); });
  bp::def("_tensor_retain_grad", &retain_grad_m);
  bp::def("_tensor_data", &data_of);
  bp::def("_tensor_backward", &backward_m);

  bp::def("set_grad_enabled_", &autograd::set_grad_enabled);
  bp::def("is_grad_enabled", &autograd::grad_enabled);
  bp::def("_autograd_backward", &autograd_backward);
  bp::def("_autograd_grad", &autograd_grad);
  bp::def("_checkpoint", &checkpoint_fn);
  register_hooks();
  bp::def("binary_cross_entropy_with_logits", &bce_with_logits,
          (bp::arg("input"), bp::arg("target"), bp::arg("reduction") = "mean"));

  bp::class_<optim::SGD, std::shared_ptr<optim::SGD>, boost::noncopyable>("_SGD", bp::no_init)
      .def("__init__", bp::make_constructor(&make_sgd))
      .def("step", &optim::SGD::step)
      .def("set_lr", &optim::SGD::set_lr)
      .def("momentum_buffers", &momentum_buffers);
  bp::class_<optim::Adam, std::shared_ptr<optim::Adam>, boost::noncopyable>("_Adam", bp::no_init)
      .def("__init__", bp::make_constructor(&make_adam))
      .def("step", &optim::Adam::step)
      .def("set_lr", &optim::Adam::set_lr)
      .def("steps", &optim::Adam::steps)
      .def("exp_avg", &exp_avg)
      .def("exp_avg_sq", &exp_avg_sq);
}

}  // namespace kiln::python
