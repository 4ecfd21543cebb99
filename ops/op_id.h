// OpId: one enumerator per row of ops/ops.def, and nothing else. Kept apart from
// ops/registry.h (the op descriptions and OpCall) so that code compiled without the
// standard library can name ops: NVRTC, which gets this header, runtime/macros.h and
// ops/pointwise_math.h embedded in the fused CUDA kernels' source (jit/cuda/).
#pragma once

#include "runtime/macros.h"

namespace kiln {

enum class OpId : uint16_t {
#define KILN_OP(id, name, family, rule) id,
#include "ops/ops.def"
#undef KILN_OP
  NumOps
};
constexpr int kNumOps = static_cast<int>(OpId::NumOps);

}  // namespace kiln
