// Recording: the dispatcher's side of autograd. After an op runs with grad mode on and
// an input that requires grad, record() gives its output a grad_fn (an OpNode with the
// op's backward rule). In-place ops are checked before they run (a leaf that requires
// grad may only be written under no_grad; an input the rule needs must not be the one
// overwritten) and move the target's history onto the new node after.
#pragma once

#include <memory>

#include "ops/autograd/node.h"

namespace kiln::autograd {

extern constinit thread_local bool tls_grad_enabled;
// > 0 while this thread runs kiln's own loops: a backward pass (it recomputes forward
// ops on the same inputs) or an optimizer step (the same update for every parameter).
// The tracer does not look for the start of a user loop inside them.
extern constinit thread_local int tls_library_loop_depth;
struct LibraryLoopScope {
  LibraryLoopScope() { ++tls_library_loop_depth; }
  ~LibraryLoopScope() { --tls_library_loop_depth; }
  LibraryLoopScope(const LibraryLoopScope&) = delete;
  LibraryLoopScope& operator=(const LibraryLoopScope&) = delete;
};

// Cheap test dispatch runs on every op: grad mode on and an input requiring grad.
inline bool should_record(const OpCall& call) {
  if (!tls_grad_enabled) return false;
  for (const Tensor& t : call.inputs)
    if (requires_grad(t)) return true;
  return false;
}

void record(const OpCall& call, const OutputMeta& meta, const Tensor& out);

// Before an in-place op runs: validates it and says what out's history becomes.
// After the op ran, rebase(out, plan).
struct InPlacePlan {
  bool changes_history = false;  // false: leave out's autograd state alone
  std::shared_ptr<Node> node;    // out's new grad_fn; null: out no longer requires grad
};
InPlacePlan prepare_in_place(const OpCall& call, const OutputMeta& meta, const Tensor& out);
void rebase(const Tensor& out, const InPlacePlan& plan);

}  // namespace kiln::autograd
