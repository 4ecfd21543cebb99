#include "ops/autograd/checkpoint.h"

#include "ops/api.h"
#include "ops/autograd/engine.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/node.h"
#include "runtime/error.h"

namespace kiln::autograd {
namespace {

class CheckpointNode final : public Node {
 public:
  CheckpointNode(SegmentFn fn, std::vector<Tensor> inputs, RandomState rng, int outputs)
      : fn_(std::move(fn)), saved_(std::move(inputs)), rng_(rng), outputs_(outputs) {
    sequence = next_sequence();
    retained.resize(static_cast<size_t>(outputs));
  }
  std::string name() const override { return "CheckpointBackward"; }
  int num_outputs() const override { return outputs_; }
  void release() override {
    saved_.clear();
    released_ = true;
  }

  TensorList apply(const TensorList& grads) override {
    KILN_CHECK(!released_, Error,
               "[checkpoint] backward ran a second time through a checkpointed segment whose "
               "inputs were freed; pass retain_graph=true to the first backward");
    // Recompute the segment with history, from detached copies of its inputs.
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < saved_.size(); ++i) {
      Tensor t = saved_[i].detach();
      if (next[i].fn) t.set_requires_grad(true);
      inputs.push_back(t);
    }
    std::vector<Tensor> outputs;
    {
      GradModeScope grad_on(true);
      const RandomState now = current_random_state();
      restore_random_state(rng_);
      outputs = fn_(inputs);
      restore_random_state(now);
    }
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
      if (grads[i].defined() && requires_grad(outputs[i])) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    TensorList result(saved_.size());
    if (in_grad_call()) {
      // Under autograd::grad(): the segment inputs' gradients only, no leaf's grad()
      // touched (a parameter used inside the segment included).
      std::vector<Tensor> wrt;
      std::vector<size_t> slots;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!next[i].fn) continue;
        wrt.push_back(inputs[i]);
        slots.push_back(i);
      }
      if (roots.empty() || wrt.empty()) return result;
      const std::vector<Tensor> g = grad(roots, wrt, root_grads, false, /*allow_unused=*/true);
      for (size_t k = 0; k < slots.size(); ++k) result[slots[k]] = g[k];
      return result;
    }
    if (!roots.empty()) backward(roots, root_grads);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (next[i].fn) result[i] = inputs[i].grad();
    return result;
  }

 private:
  SegmentFn fn_;
  std::vector<Tensor> saved_;
  RandomState rng_;
  int outputs_;
  bool released_ = false;
};

}  // namespace

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs) {
  const RandomState rng = current_random_state();
  std::vector<Tensor> outputs;
  {
    NoGradScope no_grad;
    outputs = fn(inputs);
  }
  if (!grad_enabled()) return outputs;
  // Parameters used inside fn are not inputs: the segment gets a node whenever grad
  // mode is on, so that backward reaches them through the recomputation.
  auto node = std::make_shared<CheckpointNode>(fn, inputs, rng, static_cast<int>(outputs.size()));
  node->next.resize(inputs.size());
  node->inputs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->inputs[i] = ValueInfo{inputs[i].sizes(), inputs[i].dtype(), inputs[i].device()};
    if (requires_grad(inputs[i])) node->next[i] = edge_of(inputs[i]);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!is_floating(outputs[i].dtype())) continue;
    for (const Tensor& in : inputs)
      if (outputs[i].same(in)) outputs[i] = outputs[i].detach();
    AutogradMeta& m = meta_of(outputs[i]);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_slot = static_cast<int>(i);
  }
  return outputs;
}

}  // namespace kiln::autograd
