// Shape, dtype and device rules of the ops that work along one dim (attrs.dim, already
// wrapped into range by ops/api.cpp): gather / scatter / scatter_add / index_add, the
// sorts (argsort, topk) and the scans (cumsum, cumprod, prod). Called by infer_output;
// errors name the op and the argument, as in ops/shape_rules.cpp.
#pragma once

#include "ops/registry.h"

namespace kiln {

OutputMeta infer_along_dim(const OpCall& call);

}  // namespace kiln
