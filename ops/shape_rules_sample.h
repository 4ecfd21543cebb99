// Shape rules of multinomial (probs [n] or [b, n] -> [num_samples] or [b, num_samples]
// int64) and nonzero (x -> [attrs.count, rank] int64, attrs.count found by a host read
// before the call). Called by infer_output; errors name the op and the argument. Also
// declared here, the Collective family's rule (ops/distributed/collective_ops.cpp): the
// process group of attrs.count exists and can reduce the input in place.
#pragma once

#include "ops/registry.h"

namespace kiln {

OutputMeta infer_multinomial(const OpCall& call);
OutputMeta infer_nonzero(const OpCall& call);
OutputMeta infer_collective(const OpCall& call);

}  // namespace kiln
