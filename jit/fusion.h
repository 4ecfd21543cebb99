// FusionPlan: what a compiled trace runs, in order. Built from a TraceProgram by
//   1. dead-code elimination (values nobody holds or reads, not in place),
//   2. common-subexpression elimination (same op, attributes and inputs, no scalars),
//   3. fusion grouping, in trace order, one open group at a time:
//        pointwise ops (unary, clamp, binary, where, cast, full) of one output shape
//        join a group; a row reduction over the trailing dims (sum, mean, max, min, var),
//        softmax/log_softmax over the last dim and layer_norm turn it into a row group
//        whose pointwise producers and consumers stay inside;
//        views, matmul/linear/conv and every other op are steps of their own (library
//        calls: BLAS, the eager kernels) and close the open group;
//   4. materialization: a value exists as a tensor if it leaves its group (read by a later
//      step, held by the user, written in place); it escapes (a fresh allocation per run)
//      if the user holds it or a view of it, else it lives in the plan's arena.
#pragma once

#include <functional>
#include <string>
#include <vector>

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

struct FusionOptions {
  // Which ops the backend can generate code for; others become library steps.
  std::function<bool(const tracer::TraceProgram& program, int op)> can_fuse;
  int64_t max_single_row = 1 << 16;  // a reduction to one row of more cols stays a library call
};

struct FusionPlan {
  std::vector<int> canonical;  // per op: itself, the op CSE merged it into, or -1 (dead)
  std::vector<Step> steps;
  std::vector<uint8_t> materialized;  // per op: a tensor holds its value during the run
  std::vector<uint8_t> escapes;       // per op: allocated fresh each run
  std::vector<int> step_of;           // per op: the step computing it (-1: dead)
  std::vector<std::string> notes;     // what stayed unfused and why
  int dead = 0, merged = 0;

  int kernel_count() const;
  std::string str(const tracer::TraceProgram& program) const;
};

// The guard of external input `slot` (guards sit on the op that first reads an input).
const tracer::TensorGuard& external_guard(const tracer::TraceProgram& program, int slot);
// The input dims of op `i` (its external guard or the producing op's output).
const Dims& input_sizes(const tracer::TraceProgram& program, const tracer::InputRef& ref);
DType input_dtype(const tracer::TraceProgram& program, const tracer::InputRef& ref);
// Index of op i's first scalar in the run-time scalar list.
std::vector<int> scalar_bases(const tracer::TraceProgram& program);

FusionPlan plan_fusion(const tracer::TraceProgram& program, const FusionOptions& options);

}  // namespace kiln::jit
