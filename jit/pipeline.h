// The JIT pipeline: how a trace becomes fused code, as named passes run in order.
//
//   cse          ops equal to an earlier one read its value        (jit/plan_passes.h)
//   dce          what nobody holds, reads or writes in place goes  (jit/plan_passes.h)
//   fuse         kernel groups; off: one kernel per fusible op      (jit/plan_passes.h)
//   store        which values are stored, which escape to the user (jit/plan_passes.h)
//   attention    softmax(q @ k^T * scale [+ mask]) @ v written out by hand into one fused
//                attention step, where the target's kernels take it (jit/attention_rewrite.h;
//                CUDA; the CPU with tracer::config().cpu_attention); FusionOptions::attention
//   epilogue     the target's fold of act(a @ b + bias) into one GEMM step (CUDA:
//                jit/cuda/matmul_epilogue.h); FusionOptions::fold_epilogues
//   -- then per kernel group, by the compile driver (jit/compile_driver.h):
//   lower        group -> KernelIR (jit/lower.h)
//   simplify     constant folding and exact identities on the KernelIR (jit/kernel_ir.h)
//   codegen, compile, instantiate: the backend's (jit/llvm/, jit/cuda/)
//
// KILN_JIT_DISABLE=fuse,cse,... switches passes off for bisecting a wrong result or a
// slowdown: cse, dce, fuse, attention, epilogue and simplify can be, store and the rest cannot
// (`store` is refused with that reason, like an unknown name).
#pragma once

#include "jit/fusion.h"

namespace kiln::jit {

// The plan: the passes above up to and including epilogue, skipping those in
// options.disabled (a switched-off `fuse` runs one_kernel_per_op instead).
FusionPlan plan_fusion(const tracer::TraceProgram& program, const FusionOptions& options);

// The passes KILN_JIT_DISABLE names (read once into tracer::config().jit_disable). A bad
// list is reported once on stderr and ignored, like KILN_LOGS.
PassSet disabled_passes();

}  // namespace kiln::jit
