// Replay: a walk that followed a compiled path to its end runs the compiled trace once,
// at the boundary, on the walk's inputs and scalars, and binds the lazy tensors the user
// still holds (verified against eager under KILN_VERIFY=1).
#pragma once

#include "tracer/statistics.h"
#include "tracer/walk.h"

namespace kiln::tracer {

// Runs node.compiled for the walk (which ended at node) and binds its outputs; counts the
// replay and its time in `statistics`, and in the trace's speed trial (speed_check.h),
// which may leave the anchor eager once it is complete.
void replay_compiled(Walk& walk, TraceNode& node, TraceStatistics& statistics);

}  // namespace kiln::tracer
