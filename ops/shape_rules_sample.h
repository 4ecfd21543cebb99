// Shape rules of multinomial (probs [n] or [b, n] -> [num_samples] or [b, num_samples]
// int64) and nonzero (x -> [attrs.count, rank] int64, attrs.count found by a host read
// before the call). Called by infer_output; errors name the op and the argument.
#pragma once

#include "ops/registry.h"

namespace kiln {

OutputMeta infer_multinomial(const OpCall& call);
OutputMeta infer_nonzero(const OpCall& call);

}  // namespace kiln
