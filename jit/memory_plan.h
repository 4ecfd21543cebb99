// MemoryPlan: where a compiled trace's intermediates live. Values that are stored (plan.stored)
// but never reach the user get a slice of one arena owned by the plan and reused on every
// run; two values share bytes only if their lifetimes (from the step that writes one to
// the last step that reads it or any view of it) do not overlap. Values the user may hold
// are allocated fresh each run, so a later run never overwrites them. The arena lives on the
// trace's home device (tracer::home_device); host-side values of a GPU trace are fresh too.
#pragma once

#include <string>
#include <vector>

#include "jit/fusion.h"

namespace kiln::jit {

struct MemoryPlan {
  int64_t arena_bytes = 0;
  std::vector<int64_t> offset;  // per op: byte offset in the arena, or -1
  int64_t naive_bytes = 0;      // what the arena values would take without reuse
  int64_t live_bytes = 0;       // the most bytes alive at one step (no packing does better)
  std::string str() const;
};

MemoryPlan plan_memory(const tracer::TraceProgram& program, const FusionPlan& plan);

}  // namespace kiln::jit
