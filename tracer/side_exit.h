// Side exits and materialization (the role of LuaJIT's lj_snap.c). A walk replaying a
// compiled trace holds lazy tensors; when the op stream leaves the compiled path (a
// guard fails, another op comes, memory is read while work is pending), the walk takes a
// side exit: it materializes (runs the pending ops eagerly, in order, and binds their
// values to the lazy tensors the user holds) and records on from there.
#pragma once

#include <exception>
#include <vector>

#include "tracer/walk.h"

namespace kiln::tracer {

// Leaves the compiled path at the walk's node for `cause` (a Replay reason): charges the
// compiled trace being followed, logs, materializes, and records on. If materializing
// throws, the pending values are failed, the walk is cleared, and the error propagates.
void side_exit(Walk& walk, const BreakCause& cause);

// Runs the walk's first `count` ops eagerly and binds their values (0: nothing to run).
void materialize(Walk& walk, size_t count);

// Gives the lazy tensors the user still holds the values computed for them.
void bind_outputs(const Walk& walk, const std::vector<Tensor>& values);

// The walk failed (running its compiled trace or its pending ops threw `error`): the lazy
// values the user holds that never got one are marked, so reading them is a clear error.
void fail_pending_values(const Walk& walk, std::exception_ptr error);

}  // namespace kiln::tracer
