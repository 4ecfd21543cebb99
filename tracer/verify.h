// KILN_VERIFY=1: every replay of a compiled trace also runs eagerly, and the two must
// agree: relative error at most 1e-4 (of the value's largest magnitude) on every value
// the user holds or the trace kept live. Where they differ by more, a float64 run of the
// same program decides, as torch._dynamo's accuracy check does (`same(..., fp64_ref)`):
// a value whose exact result is ill-conditioned (AdamW normalizing a gradient that is
// rounding noise, such as a key bias's) differs between any two roundings, eager's
// included, so the compiled value passes when it is no further from the float64 result
// than 10x eager's distance (or 1e-4). Otherwise it raises, naming the trace and the op.
// A collective (registry.h: has_effects) runs in the eager reference as in the replay (on
// every rank alike: KILN_VERIFY is every rank's environment, and both runs happen on every
// replay); the float64 run, made only on a mismatch and so on one rank alone, never calls
// it: it takes the eager reference's result of the collective, widened.
#pragma once

#include <memory>
#include <vector>

#include "tracer/compiled_trace.h"

namespace kiln::tracer {

struct VerifyReference {
  std::vector<Tensor> values;  // the eager results, per op
  // The inputs before the replay, floating ones as float64, for the float64 run that
  // judges a mismatch (the replay writes some inputs in place).
  std::vector<Tensor> wide_inputs;
  // Per op with effects (a collective): its result just after it ran (a copy).
  std::vector<Tensor> effects;
};

// The eager results of `compiled` for these inputs, run on copies of the inputs the
// trace writes in place (so the replay still sees the originals).
VerifyReference verify_reference(const CompiledTrace& compiled,
                                 const std::vector<Tensor>& externals,
                                 const std::vector<Scalar>& scalars);

// Throws Error when a value of the replay differs from the eager reference by more than
// rounding can explain (above).
void verify_replay(const CompiledTrace& compiled, const std::vector<Tensor>& values,
                   const VerifyReference& reference, const std::vector<Scalar>& scalars,
                   const std::vector<std::weak_ptr<TensorImpl>>& outputs);

}  // namespace kiln::tracer
