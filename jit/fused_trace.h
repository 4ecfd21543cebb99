// FusedTrace: what both fused backends (jit/llvm, jit/cuda) do around their kernels when
// a compiled trace replays: find each input (an external or an earlier op's value), run
// the view and library steps through the eager kernels, give intermediates their arena
// slice and escaping values a fresh tensor, and hand the user the values they hold. A
// value held at replay that the plan kept as an intermediate makes that replay run
// interpreted (logged once).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "jit/fusion.h"
#include "jit/memory_plan.h"
#include "ops/registry.h"
#include "tracer/backend.h"

namespace kiln::jit {

class FusedTrace : public tracer::Executable {
 public:
  int kernel_count() const override { return plan_.kernel_count(); }
  std::vector<std::string> notes() const override { return plan_.notes; }
  void release_scratch() const override { arena_.reset(); }
  int64_t arena_bytes() const override { return memory_.arena_bytes; }

 protected:
  FusedTrace(tracer::TraceProgram program, FusionPlan plan, MemoryPlan memory);

  // True when this replay must run interpreted (a value held now was not planned to be).
  bool must_interpret(const std::vector<bool>& wanted) const;
  // Whether op i's value may be handed to the user as it is (planned as held: not in the
  // arena, not a view of an arena value).
  bool user_safe(size_t i) const { return i < user_safe_.size() && user_safe_[i]; }
  const Tensor& resolve(const tracer::InputRef& r, const std::vector<Tensor>& externals,
                        const std::vector<Tensor>& v) const {
    return r.kind == tracer::InputRef::Kind::External ? externals[r.index]
                                                      : v[plan_.canonical[r.index]];
  }
  // Op i's tensor for this run: its in-place target, its arena slice (on the CPU the
  // plan's arena, allocated on first use; on a GPU the arena all plans of the device and
  // thread share) or a fresh tensor.
  Tensor output_for(int i, const std::vector<Tensor>& externals,
                    const std::vector<Tensor>& v) const;
  // The eager call for op i with this run's inputs and scalars; for the op of an attention
  // step (plan.attention), the step's call (jit/attention_rewrite.h).
  OpCall call_for(int i, const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
                  const std::vector<Tensor>& v) const;
  // Runs library op i's call (call_for) into out: its eager kernel, or the attention step.
  void run_library_call(int i, const OpCall& call, const Tensor& out) const;
  // Runs a View or Library step into v[step.op]; `out` is the tensor a library op writes.
  void run_eager_step(const Step& step, const std::vector<Tensor>& externals,
                      const std::vector<Scalar>& scalars, std::vector<Tensor>& v,
                      const Tensor& out) const;
  // Values the user holds (wanted now or live at compile time) into `values`.
  void hand_out(std::vector<Tensor>& values, const std::vector<Tensor>& v,
                const std::vector<bool>& wanted) const;
  Scalar scalar_arg(const std::vector<Scalar>& scalars, int op, int k) const {
    return scalars[static_cast<size_t>(scalar_base_[op] + k)];
  }
  // A kernel's scalar payloads (a double's bits or an int64) for this run.
  void scalar_payloads(const std::vector<int>& slots, const std::vector<uint8_t>& is_float,
                       const std::vector<Scalar>& scalars, int64_t* out) const;

  tracer::TraceProgram program_;
  FusionPlan plan_;
  MemoryPlan memory_;

 private:
  std::vector<uint8_t> user_safe_;  // per op: may be handed to the user as it is
  std::vector<int> scalar_base_;
  mutable std::shared_ptr<Storage> arena_;
  mutable bool warned_ = false;
};

}  // namespace kiln::jit
