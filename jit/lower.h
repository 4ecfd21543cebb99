// Lowering: one FusionGroup of a plan -> a KernelIR kernel plus how to bind it at run
// time (which tensor each operand is, its strides over the collapsed iteration space,
// which run-time scalar each kernel scalar slot reads). A pointwise op becomes one node
// that names the op (its math is the op's functor in ops/pointwise_math.h, called by
// both code generators); reductions and normalizations (mean, var, softmax, layer_norm)
// become row reductions and the pointwise ops between them. Shapes and strides are
// fixed by the trace's guards, so dims are collapsed now; the kernel code itself only
// depends on the collapsed rank, dtypes and inner-stride classes, so a batch-size change
// reuses it from the kernel cache.
#pragma once

#include <set>
#include <stdexcept>

#include "jit/fusion.h"
#include "jit/kernel_ir.h"

namespace kiln::jit {

struct OperandBinding {
  tracer::InputRef source;  // an external input, or the value of op `index`
  Dims strides;             // element strides over the kernel's collapsed shape
};

struct LoweredKernel {
  Kernel kernel;
  std::vector<OperandBinding> operands;
  std::vector<int> scalar_slots;  // per kernel scalar: index into the run-time scalars
  Dims shape;                     // the collapsed iteration shape (kernel.rank dims)
  int64_t work = 0;               // elements (pointwise) or rows (row kernel)
  int64_t cols = 1;               // elements per row
};

// Thrown for what a group cannot be lowered to (the group's ops then run eagerly).
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// simplify_ir false: the KernelIR as built (KILN_JIT_DISABLE=simplify).
LoweredKernel lower_group(const tracer::TraceProgram& program, const FusionPlan& plan,
                          const FusionGroup& group, bool simplify_ir = true);

// Whether an op on the target device type has a lowering for its dtypes
// (FusionOptions::can_fuse for the CPU and CUDA JITs).
bool can_lower(const tracer::TraceProgram& program, int op, DeviceType target);

// Fusion options for a backend: fuse what can_lower accepts for `target`, except the ops
// of groups that already failed to lower or compile (they run their eager kernels).
FusionOptions fusable_except(DeviceType target, const std::set<int>& banned);

// A group (step) that runs eagerly because `why` was thrown: logged, and the note for
// explain().
std::string eager_fallback_note(size_t step, const std::exception& why);

}  // namespace kiln::jit
