// Skip-the-function replay (kiln.compile(fn, skip=True); docs/tracer.md): the compiled
// trace that a region's call replayed from its entry to its exit, kept with the inputs
// and scalars that call bound, so that a later call can launch it without running the
// code that issued its ops.
//
// A region's plan is taken only when its one walk ran from the region's entry to its
// exit and replayed a compiled trace at the exit: no graph break, loop, side exit,
// host-side op or independent host read inside, and no random op (its seed and offset
// are per-call scalars). The caller (the Python compile wrapper) decides when launching
// is right (the function's other state: arguments that are not tensors, module state,
// globals) and binds the inputs; launch checks them against the trace's guards. A plan is
// made for one tuple of sizes and bounds: a symbolic trace's plan is its binding to the
// call's (symbolic_shapes.h), and launch checks its guards exactly, never as relations
// (the executable of a symbolic trace at other sizes, or at its own sizes with other
// bounds, would give another size's answer).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracer/compiled_trace.h"

namespace kiln::tracer {

struct RegionPlan {
  std::shared_ptr<const CompiledTrace> trace;      // null: no plan
  std::vector<Tensor> externals;                   // the inputs the call bound, slot order
  std::vector<Scalar> scalars;                     // the call's scalars, in op order
  std::vector<std::weak_ptr<TensorImpl>> outputs;  // per op: the value the call returned
};

// Whether a program can be launched without its code: no op draws random numbers.
bool launchable(const TraceProgram& program);

// Runs plan.trace on `externals` (one per slot) and returns the values of the ops in
// `wanted`. Returns "" on success; otherwise the first guard the inputs fail ("input 2:
// shape expected [8, 4], got [16, 4]"; a symbolic guard as the exact sizes and strides it
// was compiled at) and runs nothing. Verified against eager under
// KILN_VERIFY=1, like any replay.
std::string launch(const RegionPlan& plan, const std::vector<Tensor>& externals,
                   const std::vector<int>& wanted, std::vector<Tensor>* values);

}  // namespace kiln::tracer
