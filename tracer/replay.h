// Replay: a walk that followed a compiled path to its end runs the compiled trace once,
// at the boundary, on the walk's inputs and scalars, and binds the lazy tensors the user
// still holds (verified against eager under KILN_VERIFY=1).
#pragma once

#include "tracer/statistics.h"
#include "tracer/walk.h"

namespace kiln::tracer {

// Pipelined replay: once one compiled trace alone lies below the walk's path (looked for
// every kPartialProbeEvery ops until found) and its backend launches in parts
// (PartialRun: the CUDA backend, in segments), each part is launched as soon as the walk
// has passed it, so the GPU computes while the user's Python walks the rest; called after
// each replayed op. replay_compiled() then launches the rest, and a walk that leaves the
// trace keeps what ran (materialize, side_exit.h). Not under KILN_VERIFY, for symbolic or
// CPU traces; KILN_PIPELINED_REPLAY=0 turns it off (for A/B timings).
inline constexpr int kPartialProbeEvery = 32;
void advance_partial(Walk& walk);

// Runs node.compiled for the walk (which ended at node) and binds its outputs; counts the
// replay and its time in `statistics`, and in the trace's speed trial (speed_check.h),
// which may leave the anchor eager once it is complete (a binding made for this walk is
// part of the replay's cost there). Returns the trace that ran: a symbolic one's binding
// to the walk's sizes and bounds, else node.compiled; nullptr for the trial's eager turn
// at sizes or bounds no binding has (it ran the walk's own program eagerly).
std::shared_ptr<const CompiledTrace> replay_compiled(Walk& walk, TraceNode& node,
                                                     TraceStatistics& statistics);

}  // namespace kiln::tracer
