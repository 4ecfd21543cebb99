#include "ops/autograd/node.h"

#include <atomic>

#include "ops/api.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/rules.h"
#include "runtime/block_cache.h"
#include "runtime/error.h"

namespace kiln::autograd {

uint64_t next_sequence() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

AutogradMeta& meta_of(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->autograd)  // one per recorded op's output: from the per-thread block cache
    impl->autograd = std::allocate_shared<AutogradMeta>(CachedBlockAllocator<AutogradMeta>());
  return *impl->autograd;
}

Edge edge_of(const Tensor& t) {
  AutogradMeta& m = meta_of(t);
  if (m.grad_fn) return Edge{m.grad_fn, m.output_slot};
  std::shared_ptr<AccumulateGrad> sink = m.accumulator.lock();
  if (!sink) {
    sink = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.accumulator = sink;
  }
  return Edge{sink, 0};
}

// ---- AccumulateGrad

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  sequence = next_sequence();
  retained.resize(1);
}

TensorList AccumulateGrad::apply(const TensorList& grad_outputs) {
  const Tensor& incoming = grad_outputs[0];
  if (!incoming.defined()) return {};
  AutogradMeta& m = *leaf_->autograd;
  NoGradScope no_grad;
  if (!m.grad.defined()) {
    // Always a private copy: the incoming gradient may be the very tensor another leaf
    // receives (d(a + b)), or a view of one (a reshape's gradient is a view of its
    // input's, which may be the caller's grad argument), so keeping it would let a
    // later in-place accumulation write into another leaf's gradient or the caller's
    // tensor. Whether storage is shared cannot be told for a lazy value (no storage
    // while a trace replays), and the choice must not differ between recording and
    // replaying a trace (a different op stream would never replay), so no shortcut.
    m.grad = incoming.clone();
  } else {
    m.grad.add_(incoming);
  }
  return {};
}

// ---- OpNode

OpNode::OpNode(const OpCall& call, const OutputMeta& out, uint32_t saved_mask)
    : call_(call), out_(out), saved_mask_(saved_mask) {
  sequence = next_sequence();
  retained.resize(1);
  versions_.resize(call_.inputs.size());
  for (size_t i = 0; i < call_.inputs.size(); ++i) {
    if (saved_mask & bit(static_cast<int>(i)))
      versions_[i] = call_.inputs[i].impl()->version();
    else
      call_.inputs[i] = Tensor();
  }
}

std::string OpNode::name() const { return std::string(call_.name()) + "Backward"; }

void OpNode::release() {
  for (Tensor& t : call_.inputs) t = Tensor();
  released_ = true;
}

void OpNode::forget_saved(const TensorImpl* impl) {
  for (size_t i = 0; i < call_.inputs.size(); ++i) {
    if (!call_.inputs[i].defined() || call_.inputs[i].impl() != impl) continue;
    call_.inputs[i] = Tensor();
    forgotten_mask_ |= bit(static_cast<int>(i));
  }
}

const Tensor& OpNode::saved(size_t i) const {
  KILN_CHECK(!released_, Error, "[backward] trying to run ", call_.name(),
             "'s backward a second time, but its saved values were freed by the first "
             "backward pass; pass retain_graph=true to the first one");
  KILN_CHECK(!(forgotten_mask_ & bit(static_cast<int>(i))), Error, "[backward] input ", i, " of ",
             call_.name(),
             ", needed for its gradient, was modified by an in-place operation (version ",
             versions_[i],
             " when saved, then written in place with a new history); use the "
             "out-of-place form or clone() before writing");
  KILN_CHECK(i < call_.inputs.size() && call_.inputs[i].defined(), Error, "[backward] ",
             call_.name(), "'s backward reads input ", i, ", which was not saved (kiln bug)");
  const uint32_t now = call_.inputs[i].impl()->version();
  KILN_CHECK(now == versions_[i], Error, "[backward] input ", i, " of ", call_.name(),
             ", needed for its gradient, was modified by an in-place operation (version ",
             versions_[i], " when saved, now ", now,
             "); use the out-of-place form or clone() before writing");
  return call_.inputs[i];
}

TensorList OpNode::apply(const TensorList& grad_outputs) {
  const Tensor& grad = grad_outputs[0];
  if (!grad.defined()) return TensorList(next.size());
  return backward_rule(call_.op).backward(*this, grad);
}

}  // namespace kiln::autograd
