// Where a compiled CUDA trace's steps are cut into segments for pipelined replay
// (tracer/replay.h): each segment gets its own CUDA graph and is launched once the walk
// has passed its last op. A cut is made only where no step before it touches an op after
// it, and every op after it that reads (or writes into) an op before it finds that value
// kept, so that a walk leaving the trace after a cut can run the rest eagerly from what
// the launched segments made. The first segments are short, so that the GPU starts soon
// after the walk does (the GPU idled while a training step's walk passed its first 256
// ops: 2.3-2.9 ms of a 20.8 ms GPT step on an H200): at least kFirstSegmentOps ops, each
// next one at least twice its predecessor's minimum up to kSegmentOps; the last segment
// holds at least kSegmentOps (shorter traces are one segment).
#pragma once

#include <cstddef>
#include <vector>

#include "jit/fusion.h"

namespace kiln::jit::cuda_backend {

inline constexpr size_t kSegmentOps = 256;
inline constexpr size_t kFirstSegmentOps = 32;

struct SegmentCut {
  size_t first_step = 0, end_step = 0;  // steps [first_step, end_step)
  size_t ops_end = 0;                   // the walk depth after which it may launch
};

struct SegmentPlan {
  std::vector<SegmentCut> cuts;
  // Per segment, the library steps whose escaping value is copied out at its end: the
  // segment of the last step writing into the value in place, or the value's own.
  std::vector<std::vector<size_t>> copy_outs;
  std::vector<int> copy_segment;  // per step: its copy-out's segment, or -1
};

SegmentPlan cut_segments(const tracer::TraceProgram& program, const FusionPlan& plan);

// Whether op i's value exists after its step ran: stored by its kernel, or made by a view
// or library step as its own op (not a value a kernel keeps in registers, nor one a
// library step absorbed: a folded matmul, the ops an attention step replaced).
bool value_kept(const FusionPlan& plan, size_t i);

}  // namespace kiln::jit::cuda_backend
