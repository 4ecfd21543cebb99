// The backward engine: runs the graph behind some root tensors in reverse creation
// order (a node runs once every gradient for it has arrived), with grad mode off, so
// each rule's ops are ordinary recorded-and-fused ops and nothing new is recorded.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace kiln::autograd {

// Accumulates d(roots)/d(leaf) * grads into every leaf's grad(). An undefined grad for
// a one-element root means 1. Without retain_graph the graph's saved values are freed.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// The gradients of roots with respect to inputs (returned, leaves' grad() untouched).
// allow_unused: an input the roots do not depend on gets an undefined tensor instead
// of an error.
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grads = {}, bool retain_graph = false,
                         bool allow_unused = false);
// True while this thread runs a grad() pass (a node that runs a nested pass, as a
// checkpoint does, must then return gradients instead of accumulating into leaves).
bool in_grad_call();

}  // namespace kiln::autograd
