#include "ops/autograd/hooks.h"

#include <algorithm>
#include <atomic>

#include "ops/autograd/grad_mode.h"
#include "runtime/error.h"

namespace kiln::autograd {
namespace {

uint64_t next_hook_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

void erase_id(std::vector<SlotHook>& hooks, uint64_t id) {
  std::erase_if(hooks, [id](const SlotHook& h) { return h.id == id; });
}

Tensor apply_list(const std::vector<SlotHook>& hooks, int slot, Tensor g) {
  // A hook may register or remove hooks: run over a copy.
  const std::vector<SlotHook> now = hooks;
  for (const SlotHook& h : now) {
    if (h.slot != slot) continue;
    Tensor r = h.fn(g);
    if (!r.defined()) continue;
    KILN_CHECK(r.sizes() == g.sizes(), Error,
               "[register_hook] a hook changed the size of the "
               "gradient from ",
               dims_str(g.sizes()), " to ", dims_str(r.sizes()));
    g = std::move(r);
  }
  return g;
}

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, FunctionBackward fn, int outputs)
      : name_(std::move(name)), fn_(std::move(fn)), outputs_(outputs) {
    sequence = next_sequence();
    retained.resize(static_cast<size_t>(outputs));
  }
  std::string name() const override { return name_; }
  int num_outputs() const override { return outputs_; }
  void release() override { fn_ = nullptr; }

  TensorList apply(const TensorList& grads) override {
    KILN_CHECK(fn_ != nullptr, Error, "[backward] ", name_,
               ": trying to backward through the graph a second time (its saved values were "
               "freed); pass retain_graph=True to the first backward");
    TensorList out = fn_(grads);
    KILN_CHECK(out.size() == next.size(), Error, "[backward] ", name_, " returned ", out.size(),
               " gradients, expected ", next.size(), " (one per input)");
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].defined() || !next[i].fn) continue;
      KILN_CHECK(out[i].sizes() == inputs[i].sizes, Error, "[backward] ", name_,
                 " returned a gradient of shape ", dims_str(out[i].sizes()), " for input ", i,
                 " of shape ", dims_str(inputs[i].sizes));
    }
    return out;
  }

 private:
  std::string name_;
  FunctionBackward fn_;
  int outputs_;
};

}  // namespace

void HookHandle::remove() {
  if (auto node = node_.lock()) erase_id(node->pre_hooks, id_);
  if (auto leaf = leaf_.lock(); leaf && leaf->autograd) erase_id(leaf->autograd->hooks, id_);
}

HookHandle register_hook(const Tensor& t, GradHook fn) {
  KILN_CHECK(t.defined(), ValueError, "[register_hook] the tensor is undefined");
  KILN_CHECK(requires_grad(t), Error,
             "[register_hook] cannot register a hook on a tensor that doesn't require gradient");
  AutogradMeta& m = meta_of(t);
  const uint64_t id = next_hook_id();
  if (m.grad_fn) {
    m.grad_fn->pre_hooks.push_back(SlotHook{m.output_slot, id, std::move(fn)});
    return HookHandle(m.grad_fn, {}, id);
  }
  m.hooks.push_back(SlotHook{0, id, std::move(fn)});
  return HookHandle({}, t.impl_ptr(), id);
}

Tensor run_hooks(Node& n, int slot, Tensor g) {
  if (!n.pre_hooks.empty()) g = apply_list(n.pre_hooks, slot, std::move(g));
  if (auto* sink = dynamic_cast<AccumulateGrad*>(&n)) {
    const auto& leaf = sink->leaf();
    if (leaf->autograd && !leaf->autograd->hooks.empty())
      g = apply_list(leaf->autograd->hooks, 0, std::move(g));
  }
  return g;
}

std::vector<Tensor> record_function(const std::string& name, FunctionBackward fn,
                                    const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs,
                                    const std::vector<bool>& differentiable) {
  const bool any = grad_enabled() && std::any_of(inputs.begin(), inputs.end(),
                                                 [](const Tensor& t) { return requires_grad(t); });
  if (!any) return outputs;
  auto node = std::make_shared<FunctionNode>(name, std::move(fn), static_cast<int>(outputs.size()));
  node->next.resize(inputs.size());
  node->inputs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    node->inputs[i] = ValueInfo{inputs[i].sizes(), inputs[i].dtype(), inputs[i].device()};
    if (requires_grad(inputs[i])) node->next[i] = edge_of(inputs[i]);
  }
  std::vector<Tensor> result;
  result.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    const bool diff = i >= differentiable.size() || differentiable[i];
    if (!o.defined() || !diff || !is_floating(o.dtype())) {
      result.push_back(o);
      continue;
    }
    // A fresh alias: the caller's tensor (which the backward may keep) never points
    // back at the node, so keeping it makes no reference cycle.
    Tensor alias = o.detach();
    AutogradMeta& m = meta_of(alias);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_slot = static_cast<int>(i);
    result.push_back(std::move(alias));
  }
  return result;
}

}  // namespace kiln::autograd
