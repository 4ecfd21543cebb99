#include "ops/autograd/record.h"

#include <algorithm>

#include "ops/autograd/grad_mode.h"
#include "ops/autograd/rules.h"
#include "runtime/block_cache.h"
#include "runtime/error.h"

namespace kiln::autograd {

constinit thread_local bool tls_grad_enabled = true;
constinit thread_local int tls_library_loop_depth = 0;

bool grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool enabled) { tls_grad_enabled = enabled; }

namespace {

uint32_t needs_grad_mask(const OpCall& call) {
  uint32_t mask = 0;
  for (size_t i = 0; i < call.inputs.size(); ++i)
    if (requires_grad(call.inputs[i])) mask |= bit(static_cast<int>(i));
  return mask;
}

// Lists node among the savers of t (see node.h: cycles through in-place writes); the
// expired entries go when the list doubles, so a parameter saved by every step's node
// keeps a short list.
void note_saved_by(const Tensor& t, const std::shared_ptr<OpNode>& node) {
  auto& savers = meta_of(t).saved_by;
  if (savers.size() >= 8 && (savers.size() & (savers.size() - 1)) == 0)
    savers.erase(std::remove_if(savers.begin(), savers.end(),
                                [](const std::weak_ptr<OpNode>& w) { return w.expired(); }),
                 savers.end());
  savers.push_back(node);
}

std::shared_ptr<OpNode> make_node(const OpCall& call, const OutputMeta& meta,
                                  const BackwardRule& rule, uint32_t needs) {
  const uint32_t saved = rule.saved(call, needs);
  // One per recorded op: its block from the per-thread cache (runtime/block_cache.h).
  auto node = std::allocate_shared<OpNode>(CachedBlockAllocator<OpNode>(), call, meta, saved);
  node->next.resize(call.inputs.size());
  node->inputs.resize(call.inputs.size());
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    node->inputs[i] = ValueInfo{t.sizes(), t.dtype(), t.device()};
    if (needs & bit(static_cast<int>(i))) node->next[i] = edge_of(t);
    if (saved & bit(static_cast<int>(i))) note_saved_by(t, node);
  }
  return node;
}

bool differentiable_output(const OutputMeta& meta) { return is_floating(meta.dtype); }

}  // namespace

void record(const OpCall& call, const OutputMeta& meta, const Tensor& out) {
  const BackwardRule& rule = backward_rule(call.op);
  if (!rule.backward || !differentiable_output(meta)) return;
  auto node = make_node(call, meta, rule, needs_grad_mask(call));
  AutogradMeta& m = meta_of(out);
  m.requires_grad = true;
  m.grad_fn = std::move(node);
  m.output_slot = 0;
  m.is_view = call.info().family == OpFamily::View;
}

InPlacePlan prepare_in_place(const OpCall& call, const OutputMeta& meta, const Tensor& out) {
  if (!tls_grad_enabled) return {};
  const uint32_t needs = needs_grad_mask(call);
  const bool out_tracked = requires_grad(out);
  if (needs == 0 && !out_tracked) return {};
  const AutogradMeta* om = out.impl()->autograd.get();
  KILN_CHECK(!(out_tracked && !om->grad_fn), Error, "[", call.name(),
             "_] a leaf tensor that requires grad cannot be written in place (it would lose "
             "its gradient); do it under no_grad (as optimizers do) or on a clone()");
  const BackwardRule& rule = backward_rule(call.op);
  // Overwritten by values without history: out stops requiring grad.
  if (needs == 0 || !rule.backward || !differentiable_output(meta)) return {true, nullptr};
  const bool shares_storage = out.impl()->storage && out.impl()->storage.use_count() > 1;
  KILN_CHECK(!((om && om->is_view) || (!out_tracked && shares_storage)), Error, "[", call.name(),
             "_] writing values that require grad in place into a view (or a tensor that "
             "has views) is not supported by kiln's autograd; build the result out of place "
             "(cat / stack / where)");
  const uint32_t saved = rule.saved(call, needs);
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    KILN_CHECK(!((saved & bit(static_cast<int>(i))) && call.inputs[i].same(out)), Error, "[",
               call.name(), "_] the in-place op overwrites input ", i,
               ", which its gradient needs; use the out-of-place form");
  }
  return {true, make_node(call, meta, rule, needs)};
}

void rebase(const Tensor& out, const InPlacePlan& plan) {
  if (!plan.changes_history) return;
  AutogradMeta& m = meta_of(out);
  for (const std::weak_ptr<OpNode>& w : m.saved_by)
    if (std::shared_ptr<OpNode> node = w.lock()) node->forget_saved(out.impl());
  m.saved_by.clear();
  m.requires_grad = plan.node != nullptr;
  m.grad_fn = plan.node;
  m.output_slot = 0;
}

}  // namespace kiln::autograd
