// CompiledTrace: the captured artifact. What a hot trace compiled into (its program, the
// backend's Executable, the guards of its inputs, where it was made and why it was
// recompiled), immutable once made and shared as std::shared_ptr<const CompiledTrace>.
// The mutable tracing state (walks, counters, lifecycle) lives elsewhere: trace_tree.h
// counts a compiled trace's replays and side exits on the node that holds it. A symbolic
// trace (symbolic_shapes.h) keeps one mutable cache: its plans bound per size.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "tracer/backend.h"
#include "tracer/break_reason.h"
#include "tracer/symbolic_shapes.h"
#include "tracer/user_site.h"

namespace kiln::tracer {

struct CompiledTrace {
  int id = 0;
  int generation = 0;  // 0 for the first compile under an anchor, then 1, 2, ... (recompiles)
  TraceProgram program;
  std::unique_ptr<Executable> executable;
  std::vector<TensorGuard> guards;            // per external input
  UserSite site;                              // where the trace's first op was called
  std::optional<BreakCause> recompile_cause;  // why the walk left the last variant, generation > 0
  double compile_ms = 0;
  // Symbolic traces only (guards with symbols): the symbols' values in `program` (whose
  // sizes the executable was compiled for), why each dim is symbolic, and the trace bound
  // to other sizes (the one mutable part, used on the tracer's thread only).
  std::vector<int64_t> symbol_values;
  std::vector<int64_t> index_values;  // the index symbols' values (symbolic bounds) in `program`
  std::string symbolic_why;
  std::shared_ptr<SizeBindings> bindings;
  bool symbolic() const { return bindings != nullptr; }
};

}  // namespace kiln::tracer
