// The passes that make a FusionPlan, each filling in its part of the plan from the
// program and what the passes before it left (jit/pipeline.cpp runs them, in this order).
// All take the same arguments, so the pipeline is a table of them.
#pragma once

#include "jit/fusion.h"

namespace kiln::jit {

// full() of one element, not in place: a scalar broadcast wherever it is read (a kernel
// group reading it makes it from its scalar argument; nothing is loaded).
bool is_fill_scalar(const tracer::TraceOp& op);

// The plan before any pass: every op its own canonical, no steps, nothing stored.
FusionPlan unplanned(const tracer::TraceProgram& program);

// cse: a later op equal to an earlier one (same op, attributes and canonical inputs; no
// run-time scalars, not random, not a factory, not in place, no effects outside the
// process (registry.h: has_effects), not held by the user) reads
// the earlier one's value, unless something is written in place after the earlier one.
// Sets plan.canonical[later] = earlier and counts plan.merged.
void eliminate_common_subexpressions(const tracer::TraceProgram& program,
                                     const FusionOptions& options, FusionPlan& plan);

// dce: drops what nobody holds, writes in place or (through the ops kept) reads, and
// never an op with effects outside the process (a collective: the other ranks wait for it):
// plan.canonical becomes -1, counted in plan.dead. A merged op that is read keeps the op
// it was merged into.
void eliminate_dead_code(const tracer::TraceProgram& program, const FusionOptions& options,
                         FusionPlan& plan);

// fuse: plan.steps and plan.step_of, in trace order, one open kernel group at a time:
//   pointwise ops (unary, clamp, binary, where, cast, full) of one output shape join a
//   group; a row reduction over the trailing dims (sum, mean, max, min, var),
//   softmax/log_softmax over the last dim and layer_norm turn it into a row group whose
//   pointwise producers and consumers stay inside;
//   views, matmul/linear/conv and every other op (and what options.can_fuse refuses) are
//   steps of their own (library calls: BLAS, the eager kernels) and close the open group;
//   an in-place op joins only when nothing in the group reads its target through a view,
//   and closes the group.
// What stays unfused for a reason the user may not expect is a note.
void group_into_kernels(const tracer::TraceProgram& program, const FusionOptions& options,
                        FusionPlan& plan);

// What runs instead of `fuse` when it is switched off: the same steps, except that every
// op group_into_kernels would fuse is a kernel of its own.
void one_kernel_per_op(const tracer::TraceProgram& program, const FusionOptions& options,
                       FusionPlan& plan);

// Part of store, first: a narrowing pointwise op (its value smaller than the tensor it
// reads: relu's backward mask gt(x, 0), a bool, read at the backward from x, a float32
// the forward made) that is the last reader of that tensor moves into the pointwise group
// of the tensor's previous last reader, of its shape, when what else it reads exists by
// then and nothing writes its inputs in between: the narrow value is kept instead of the
// wide one (bench/models/cnn.py: conv1's output no longer stays alive through the
// backward for its relu mask).
void hoist_narrowing_ops(const tracer::TraceProgram& program, FusionPlan& plan);

// store: plan.stored and plan.escapes. A value exists as a tensor if it
// leaves its group (read by a later step, held by the user, written in place, computed by
// a library or view step); it escapes (a fresh allocation per run) if the user holds it
// or a view of it, else it lives in the plan's arena.
void mark_stored(const tracer::TraceProgram& program, const FusionOptions& options,
                 FusionPlan& plan);

// The plan's reads by value: readers[v] lists each op the plan keeps (its own canonical
// value) that reads canonical value v, once per read (inputs and in-place targets). The
// rewrites after store (epilogue, attention) ask who reads an intermediate.
std::vector<std::vector<int>> value_readers(const tracer::TraceProgram& program,
                                            const FusionPlan& plan);

}  // namespace kiln::jit
