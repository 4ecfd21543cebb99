// FusionPlan: what a compiled trace runs, in order: view steps, library steps (BLAS, the
// eager kernels) and fused kernel groups, with what is stored and what escapes to the
// user. The passes of jit/pipeline.h fill it in (CSE, DCE, grouping, storing,
// attention, the target's epilogue fold); jit/lower.h and the backends read it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "jit/attention_rewrite.h"
#include "jit/pass_set.h"
#include "tracer/backend.h"

namespace kiln::jit {

struct FusionGroup {
  std::vector<int> ops;  // trace op indices, in order
  Dims shape;            // the full iteration shape
  int reduced_dims = 0;  // trailing dims reduced by row reductions (0: pointwise group)
};

struct Step {
  enum class Kind : uint8_t { View, Library, Kernel };
  Kind kind = Kind::Library;
  int op = -1;  // View / Library
  FusionGroup group;
};

struct FusionPlan;

struct FusionOptions {
  // Which ops the backend can generate code for; others become library steps.
  std::function<bool(const tracer::TraceProgram& program, int op)> can_fuse;
  int64_t max_single_row = 1 << 16;  // a reduction to one row of more cols stays a library call
  // The target's epilogue pass (CUDA: act(a @ b + bias) into one GEMM step), run on the
  // plan once `store` has run; empty when the target has none.
  std::function<void(const tracer::TraceProgram& program, FusionPlan& plan)> fold_epilogues;
  // The target's fused attention kernels, for the `attention` pass (off: not enabled).
  AttentionKernels attention;
  PassSet disabled;  // passes switched off (KILN_JIT_DISABLE, or failed for this trace)
};

struct FusionPlan {
  std::vector<int> canonical;  // per op: itself, the op CSE merged it into, or -1 (dead)
  std::vector<Step> steps;
  std::vector<uint8_t> stored;   // per op: a tensor holds its value during the run
  std::vector<uint8_t> escapes;  // per op: allocated fresh each run
  std::vector<int> step_of;      // per op: the step computing it (-1: dead)
  // Per step: the step after whose place it is launched (itself, or a later one where the
  // target delays a small kernel to launch it with others as one: jit/cuda/horizontal.h);
  // empty: each at its own. plan_memory keeps what it reads and writes alive until then.
  std::vector<int> launch_at;
  // Library steps the `attention` pass made, by their op (the final matmul): they run
  // run_attention_step instead of that op.
  std::map<int, AttentionRewrite> attention;
  std::vector<std::string> notes;  // what stayed unfused and why
  int dead = 0, merged = 0;

  int kernel_count() const;
  std::string str(const tracer::TraceProgram& program) const;
};

// The guard of external input `slot` (guards sit on the op that first reads an input).
const tracer::TensorGuard& external_guard(const tracer::TraceProgram& program, int slot);
// The input dims of op `i` (its external guard or the producing op's output).
const Dims& input_sizes(const tracer::TraceProgram& program, const tracer::InputRef& ref);
DType input_dtype(const tracer::TraceProgram& program, const tracer::InputRef& ref);
// What an in-place write really writes: a target that is itself the value of an in-place
// op (p.copy_(a) then p.copy_(b)) resolves to that op's target, down to an external.
tracer::InputRef in_place_root(const tracer::TraceProgram& program, tracer::InputRef target);
// Index of op i's first scalar in the run-time scalar list.
std::vector<int> scalar_bases(const tracer::TraceProgram& program);

}  // namespace kiln::jit
