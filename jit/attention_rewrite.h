// The `attention` pass (jit/pipeline.h): attention written out by hand,
//
//   y = softmax(q @ kt [* or / scale] [+ mask | where(cond, ., -inf) | where(cond, -inf, .)]) @ v
//
// with kt a [..., E, S] value (k.transpose(-2, -1), or any tensor: the step reads its
// transpose back), becomes one library step that runs the fused attention op
// (ops/attention_layout.h) and writes y. Run after `store`, on the plan: the step of the
// final matmul computes y; the first matmul's step goes and the scale, mask and softmax
// leave their kernel groups (a group left empty goes). Only where it is safe:
//   - the scores, scaled, masked and softmax values and the where's fill (a one-element
//     full(), replaced too) have one reader each (the next op of the pattern), are not
//     held by the user (live, held, escaping) and not written in place, and no op
//     between the two matmuls writes anything in place;
//   - softmax over the last dim; every value, q, kt and v of one dtype the target's kernels
//     take; a floating mask of that dtype or a bool cond, broadcastable to [..., L, S];
//   - the target's kernels take the shapes, masks and layouts (AttentionKernels).
// A scale applied to q before the matmul stays where it is (the pattern's scale is 1).
// A cond built in the trace as le(cols, rows) / gt(cols, rows) of two aranges viewed as
// [1, S] and [L, 1] is the causal mask: the fused op runs with attrs.causal (its ops
// still run: the step keeps cond as an input for the fallback below).
// Run-time scalars the rewrite relies on (the fill is -inf, the aranges start at 0 with
// step 1) are checked on every run; where one fails, or the target's kernel refuses the
// actual inputs (a CUDA input whose offset breaks its row alignment), the step computes
// the ops it replaced eagerly instead, in their order, with the same scalars.
#pragma once

#include <string>
#include <vector>

#include "tracer/backend.h"

namespace kiln::jit {

// What the target's fused attention forward takes: the pass rewrites only such calls.
struct AttentionKernels {
  bool enabled = false;             // the target runs the pass
  bool masks = false;               // a mask input (bool, or floating added to the scores)
  std::vector<DType> dtypes;        // of q, k, v and the output
  std::vector<int64_t> head_sizes;  // E == Ev, one of these (empty: any E and Ev)
  int max_rank = 0;                 // q's dims at most (0: any)
  int64_t row_alignment = 0;        // bytes: last stride 1, the others multiples (0: any)
};

// The kernels of a target: the CPU's (off unless tracer::config().cpu_attention: the CPU
// forward is not faster than the composite, docs/results/attention_pass_cpu.txt) or CUDA's
// (ops/cuda/attention.cu's attention_cuda_supports).
AttentionKernels attention_kernels(DeviceType target);

struct AttentionRewrite {
  enum class Mask : uint8_t {
    None,
    Additive,  // scores + mask: a floating mask
    Keep,      // where(cond, scores, fill): false drops the key
    Drop,      // where(cond, fill, scores) (masked_fill): true drops the key
  };
  // One op the step replaces, to run it eagerly: its arguments are step inputs (>= 0)
  // or the results of earlier replaced ops (-1 - k: op k of `replaced`); the scale op
  // takes the call's scalar 0, the fill (a full() only the mask's where reads) scalar 1.
  struct ReplacedOp {
    int op = -1;  // trace index
    OpId id = OpId::Matmul;
    OpAttrs attrs;
    std::vector<int> args;
    int scalar = -1;  // the call's scalar it takes, or -1
  };
  // In trace order: scores, [scale], [fill], [mask], softmax, y (the fill may come first).
  std::vector<ReplacedOp> replaced;
  int scaled = -1;             // the scale op (trace index), or -1
  bool scale_divides = false;  // scores / scale
  // The step's inputs: q, kt, v, then the other tensors the replaced ops read (the mask
  // or cond).
  std::vector<tracer::InputRef> inputs;
  int mask_input = -1;  // index in inputs of the mask or cond (-1: none)
  Mask mask = Mask::None;
  bool causal = false;  // cond is the causal mask: the fused op takes attrs.causal, no mask
  // Run-time scalars the rewrite holds for: scalar `index` of op `op` equals `value`.
  struct ScalarCheck {
    int op = -1, index = 0;
    double value = 0.0;
  };
  std::vector<ScalarCheck> checks;

  int out() const { return replaced.back().op; }
  std::string str() const;  // the explain() note
};

struct FusionOptions;
struct FusionPlan;

// The pass: rewrites the plan in place (plan.attention, steps, step_of, stored). Does
// nothing unless options.attention.enabled.
void rewrite_attention(const tracer::TraceProgram& program, const FusionOptions& options,
                       FusionPlan& plan);

// Runs the step into out (y's tensor). call: inputs as `inputs`, scalars the scale (1
// without one) then the checked scalars' values in checks' order. The fused op where the
// checks pass and the target's kernel takes the actual inputs, else the replaced ops.
void run_attention_step(const AttentionRewrite& rewrite, const OpCall& call, const Tensor& out);

}  // namespace kiln::jit
