// Eviction: bounded memory for the trace tree. Once this thread keeps more than
// config().trace_cache_ops recorded ops (nodes, anchors' roots included) or
// config().max_traces compiled traces, the least recently walked go (a walk stamps every
// node it passes, so whole subtrees age together) until 7/8 of the cap is left. A dropped
// trace records and compiles again if it comes back; an anchor that lost every compiled
// variant goes back to recording.
#pragma once

#include "tracer/statistics.h"
#include "tracer/trace_tree.h"

namespace kiln::tracer {

// Only between walks (nothing points into the tree then). Never drops what the walk
// that just ended passed (its trace may have just compiled).
void evict_least_recent(TraceTree& tree, TraceStatistics& statistics);

}  // namespace kiln::tracer
