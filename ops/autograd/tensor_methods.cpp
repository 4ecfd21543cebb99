// The autograd methods of Tensor (declared in runtime/tensor.h).
#include "ops/autograd/engine.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/node.h"
#include "runtime/error.h"

namespace kiln {

bool Tensor::requires_grad() const { return autograd::requires_grad(*this); }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  KILN_CHECK(defined(), ValueError, "[requires_grad_] the tensor is undefined");
  AutogradMeta* m = impl_->autograd.get();
  KILN_CHECK(!(m && m->grad_fn) || requires_grad, Error,
             "[requires_grad_] requires_grad can only be turned off on a leaf; use detach() "
             "for a tensor with history (",
             grad_fn_name(), ")");
  if (m && m->grad_fn) return *this;
  KILN_CHECK(!requires_grad || is_floating(dtype()), DTypeError,
             "[requires_grad_] only floating point tensors can require gradients, got dtype ",
             dtype_name(dtype()));
  if (requires_grad || m) autograd::meta_of(*this).requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return !(impl_->autograd && impl_->autograd->grad_fn); }

Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined()) {
    KILN_CHECK(grad.sizes() == sizes(), ShapeError, "[grad] assigned gradient of shape ",
               dims_str(grad.sizes()), " to a tensor of shape ", dims_str(sizes()));
    KILN_CHECK(grad.device() == device(), DeviceError, "[grad] assigned gradient on ",
               grad.device().str(), " to a tensor on ", device().str());
  }
  if (!grad.defined() && !impl_->autograd) return;
  autograd::meta_of(*this).grad = grad;
}

void Tensor::retain_grad() {
  KILN_CHECK(requires_grad(), Error,
             "[retain_grad] can only be called on a tensor that requires grad");
  AutogradMeta& m = autograd::meta_of(*this);
  if (!m.grad_fn) return;  // leaves keep their gradient anyway
  auto& slots = m.grad_fn->retained;
  if (slots.size() <= static_cast<size_t>(m.output_slot)) slots.resize(m.output_slot + 1);
  slots[m.output_slot] = impl_;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
  autograd::NoGradScope no_grad;
  return expand(sizes());  // a view op: the tracer sees it, so lazy values stay bound
}

std::string Tensor::grad_fn_name() const {
  return impl_->autograd && impl_->autograd->grad_fn ? impl_->autograd->grad_fn->name() : "";
}

}  // namespace kiln
