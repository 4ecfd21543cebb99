// KILN_VERIFY=1: every replay of a compiled trace also runs eagerly, and the two must
// agree (relative error at most 1e-4 on every value the user holds or the trace kept
// live); a mismatch raises, naming the trace and the op.
#pragma once

#include <memory>
#include <vector>

#include "tracer/compiled_trace.h"

namespace kiln::tracer {

// The eager results of `compiled` for these inputs, run on copies of the inputs the
// trace writes in place (so the replay still sees the originals).
std::vector<Tensor> verify_reference(const CompiledTrace& compiled,
                                     const std::vector<Tensor>& externals,
                                     const std::vector<Scalar>& scalars);

// Throws Error when a value of the replay differs from the eager reference.
void verify_replay(const CompiledTrace& compiled, const std::vector<Tensor>& values,
                   const std::vector<Tensor>& reference,
                   const std::vector<std::weak_ptr<TensorImpl>>& outputs);

}  // namespace kiln::tracer
