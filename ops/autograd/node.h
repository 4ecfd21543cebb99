// The autograd graph. Every op that runs with grad mode on and an input that requires
// grad gets a Node; its Edges point to the nodes that produced its inputs (an
// AccumulateGrad for a leaf). The graph is owned from the outputs backwards: a tensor's
// AutogradMeta holds its grad_fn, each node holds the nodes behind it, and a leaf's
// AccumulateGrad is held by the edges pointing to it (the leaf only keeps a weak link).
//
// Saved values. A node keeps only the inputs its backward rule reads (never its own
// output, which would be a cycle: rules recompute what they need from the inputs), each
// with the version it had. Reading a saved input that was since written in place, or
// after the graph was released by a backward pass without retain_graph, is an error
// that names the op. A tensor written in place gets a new grad_fn whose history can lead
// back to a node that saved the tensor (`z = y.exp(); y.add_(z)`): a reference cycle.
// So the nodes that saved a tensor are listed in its AutogradMeta (weakly), and when an
// in-place write gives it a new history they let go of it (its version changed, so
// reading it there would be an error anyway; the error stays the same).
#pragma once

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace kiln::autograd {

class Node;

// Where a gradient goes: input slot `slot` of node `fn` (null: nowhere).
struct Edge {
  std::shared_ptr<Node> fn;
  int slot = 0;
};

// A gradient hook (Tensor.register_hook): sees the gradient of one value before it is
// used and returns a replacement, or an undefined tensor to keep it.
using GradHook = std::function<Tensor(const Tensor&)>;
struct SlotHook {
  int slot = 0;     // the output slot of the node (0 for a leaf)
  uint64_t id = 0;  // for removal
  GradHook fn;
};

// Shape, dtype and device of a value a node's gradient is for.
struct ValueInfo {
  Dims sizes;
  DType dtype = DType::Float32;
  Device device;
};

class Node {
 public:
  virtual ~Node() = default;
  // Gradients of the node's inputs (one per next edge; undefined for none) from the
  // gradients of its outputs (undefined where no gradient arrived).
  virtual TensorList apply(const TensorList& grad_outputs) = 0;
  virtual std::string name() const = 0;
  virtual int num_outputs() const { return 1; }
  // Drops saved values once a backward pass without retain_graph is done with them.
  virtual void release() {}

  // (Inline for up to three inputs: a node is made per op recorded, at the op rate.)
  boost::container::small_vector<Edge, 3> next;         // one per input
  boost::container::small_vector<ValueInfo, 3> inputs;  // what each input's gradient must look like
  uint64_t sequence = 0;                                // creation order: later nodes run first
  // Non-leaf tensors that asked for retain_grad(), per output slot.
  boost::container::small_vector<std::weak_ptr<TensorImpl>, 1> retained;
  // Hooks on the gradients of this node's outputs (a non-leaf's register_hook), run in
  // order when the node's incoming gradients are complete (ops/autograd/hooks.h).
  std::vector<SlotHook> pre_hooks;
};

// The gradient sink of a leaf: adds into leaf.grad (holds the leaf).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  TensorList apply(const TensorList& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// A recorded op: its call (inputs kept only where the rule reads them) and its rule.
class OpNode final : public Node {
 public:
  // saved_mask bit i: keep call.inputs[i]. The call's tensors outside the mask are
  // dropped here.
  OpNode(const OpCall& call, const OutputMeta& out, uint32_t saved_mask);
  TensorList apply(const TensorList& grad_outputs) override;
  std::string name() const override;
  void release() override;

  const OpCall& call() const { return call_; }
  const OutputMeta& output() const { return out_; }
  // A saved input; throws if it was not saved, was released or modified in place.
  const Tensor& saved(size_t i) const;
  // Lets go of the saved inputs that are `impl` (it is being written in place): later
  // reads of them throw the modified-in-place error.
  void forget_saved(const TensorImpl* impl);

 private:
  OpCall call_;
  OutputMeta out_;
  boost::container::small_vector<uint32_t, 3> versions_;
  uint32_t saved_mask_;
  uint32_t forgotten_mask_ = 0;
  bool released_ = false;
};

}  // namespace kiln::autograd

namespace kiln {
// Per-tensor autograd state (TensorImpl::autograd).
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  int output_slot = 0;
  bool is_view = false;  // made by a view op from a tensor with history
  Tensor grad;
  std::weak_ptr<autograd::AccumulateGrad> accumulator;  // leaves: the sink edges point to
  // nodes that saved this tensor (inline for two: most values are read by one or two ops)
  boost::container::small_vector<std::weak_ptr<autograd::OpNode>, 2> saved_by;
  std::vector<autograd::SlotHook> hooks;  // leaves: register_hook, run before accumulating
};

}  // namespace kiln

namespace kiln::autograd {

// The meta of t, created on demand.
AutogradMeta& meta_of(const Tensor& t);
// Whether t takes part in autograd (requires grad, directly or through its history).
inline bool requires_grad(const Tensor& t) {
  return t.defined() && t.impl()->autograd && t.impl()->autograd->requires_grad;
}
// The edge a gradient for t flows into (its grad_fn slot, or its leaf's AccumulateGrad).
Edge edge_of(const Tensor& t);
uint64_t next_sequence();

}  // namespace kiln::autograd
