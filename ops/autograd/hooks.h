// Gradient hooks and custom backward functions, the two ways user code reaches into a
// backward pass (PyTorch's Tensor.register_hook and autograd.Function; kiln.nn's module
// backward hooks are built from both).
//
// A tensor hook runs when the gradient of that tensor is complete, before it is used:
// on a non-leaf, before its grad_fn runs (and before retain_grad() keeps it); on a
// leaf, before it is accumulated into .grad. grad() captures a gradient before the
// hooks of that tensor run, as PyTorch's engine does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/autograd/node.h"

namespace kiln::autograd {

// What register_hook returns: remove() takes the hook out (again: a no-op).
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<Node> node, std::weak_ptr<TensorImpl> leaf, uint64_t id)
      : node_(std::move(node)), leaf_(std::move(leaf)), id_(id) {}
  void remove();

 private:
  std::weak_ptr<Node> node_;
  std::weak_ptr<TensorImpl> leaf_;
  uint64_t id_ = 0;
};

// Registers fn on t's gradient; t must require grad (else the error PyTorch raises).
HookHandle register_hook(const Tensor& t, GradHook fn);

// The gradient for output `slot` of node n after its hooks (a leaf's hooks when n is
// its AccumulateGrad). A hook's replacement must keep the gradient's shape.
Tensor run_hooks(Node& n, int slot, Tensor g);

// A node whose backward is fn: grads of the outputs (undefined where none arrived) ->
// grads of the inputs (one per input, undefined for none).
using FunctionBackward = std::function<TensorList(const TensorList&)>;

// Records a custom function: outputs (computed by the caller without history) become
// fresh aliases whose grad_fn is one node named `name` running fn, with an edge to each
// input that requires grad. Outputs with differentiable[i] false (or not floating)
// are returned without history. Without grad mode or an input requiring grad, the
// outputs are returned as they are.
std::vector<Tensor> record_function(const std::string& name, FunctionBackward fn,
                                    const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs,
                                    const std::vector<bool>& differentiable = {});

}  // namespace kiln::autograd
