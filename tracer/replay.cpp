#include "tracer/replay.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "runtime/error.h"
#include "tracer/backend.h"
#include "tracer/config.h"
#include "tracer/profiler.h"
#include "tracer/side_exit.h"
#include "tracer/speed_check.h"
#include "tracer/statistics.h"
#include "tracer/verify.h"

namespace kiln::tracer {
namespace {

// The key of a symbolic trace's binding for this walk's sizes and bounds (symbolic_shapes.h):
// the size symbols' values, then the index symbols'; nullopt at the values it was compiled
// for (its own executable runs).
std::optional<std::vector<int64_t>> binding_key(const CompiledTrace& compiled, const Walk& walk) {
  std::vector<int64_t> key = walk.symbol_values;
  key.resize(compiled.symbol_values.size(), 0);
  std::vector<int64_t> compiled_key = compiled.symbol_values;
  for (size_t i = 0; i < compiled.index_values.size(); ++i) {
    key.push_back(i < walk.index_values.size() && walk.index_values[i] ? *walk.index_values[i] : 0);
    compiled_key.push_back(compiled.index_values[i]);
  }
  if (key == compiled_key) return std::nullopt;
  return key;
}

// A new binding of `compiled` at `key`: the walk's program through the backend (planned
// again, kernels from the kernel cache), kept in compiled.bindings.
std::shared_ptr<const CompiledTrace> make_binding(const CompiledTrace& compiled, const Walk& walk,
                                                  const std::vector<int64_t>& key,
                                                  TraceStatistics& statistics) {
  const int64_t start = trace_clock_ns();
  TraceProgram program = walk.program();
  program.live = compiled.program.live;
  auto bound = std::make_shared<CompiledTrace>();
  bound->id = compiled.id;
  bound->generation = compiled.generation;
  bound->site = compiled.site;
  bound->recompile_cause = compiled.recompile_cause;
  for (const TraceOp& op : program.ops)
    for (const TensorGuard& g : op.new_guards) bound->guards.push_back(g);
  bound->executable = compile_trace(program);
  bound->program = std::move(program);
  const double ms = static_cast<double>(trace_clock_ns() - start) / 1e6;
  bound->compile_ms = ms;
  compiled.bindings->note_time(ms);
  compiled.bindings->add(key, bound);
  ++statistics.size_bindings;
  if (logging(kLogRecompiles))
    log_line(kLogRecompiles, detail::cat(
                                 "trace ", compiled.id, " bound to (",
                                 [&] {
                                   std::string s;
                                   const size_t sizes = compiled.symbol_values.size();
                                   for (size_t i = 0; i < key.size(); ++i)
                                     s += detail::cat(i ? ", " : "", i < sizes ? "s" : "i",
                                                      i < sizes ? i : i - sizes, "=", key[i]);
                                   return s;
                                 }(),
                                 ") in ", ms, " ms (no recompile: symbolic sizes and bounds)"));
  return bound;
}

}  // namespace

void advance_partial(Walk& walk) {
  const size_t depth = static_cast<size_t>(walk.node->depth);
  if (walk.partial) {
    if (depth >= walk.partial_next) {
      walk.partial->launch_through(depth, walk.externals, walk.scalars, walk.outputs);
      walk.partial_next = walk.partial->next_launch_at();
    }
    return;
  }
  if (walk.partial_probe == 0 || depth < static_cast<size_t>(walk.partial_probe)) return;
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_PIPELINED_REPLAY");
    return !(v && std::string(v) == "0");
  }();
  if (!enabled) {
    walk.partial_probe = 0;
    return;
  }
  // Only where one compiled trace lies below (several variants: look again further on).
  walk.partial_probe = static_cast<int>(depth) + kPartialProbeEvery;
  const TraceNode* n = walk.node;
  if (n->compiled_below != 1) return;
  while (!n->compiled) {
    const TraceNode* next = nullptr;
    for (const auto& c : n->children)
      if (c->compiled_below > 0) next = c.get();
    if (!next) return;
    n = next;
  }
  walk.partial_probe = 0;
  const CompiledTrace& c = *n->compiled;
  // Not where the replay must see the whole run at once: KILN_VERIFY's eager reference
  // (taken before any in-place write), a symbolic trace's size binding, a CPU trace under
  // the speed check (its trial times whole runs). Backends that launch only whole traces
  // (the LLVM one: the host computes its kernels, nothing to overlap) return no PartialRun.
  if (config().verify || c.symbolic() || (config().speed_check && home_device(c.program).is_cpu()))
    return;
  walk.partial = c.executable->start_partial();
  if (!walk.partial) return;
  walk.partial_node = n;
  walk.partial_next = walk.partial->next_launch_at();
  if (depth >= walk.partial_next) advance_partial(walk);
}

std::shared_ptr<const CompiledTrace> replay_compiled(Walk& walk, TraceNode& node,
                                                     TraceStatistics& statistics) {
  if (walk.partial && walk.partial_node != &node)
    throw std::logic_error("[tracer] a partial run ended at another trace than its own");
  // The speed trial's eager turn runs the same ops with the eager kernels (same values).
  const bool eager_turn = node.speed.eager_turn(*node.compiled);
  // A symbolic trace runs bound to the walk's sizes and bounds: itself at those it was
  // compiled for, else the binding kept for them, else a new one, timed for the speed
  // trial (what the replay costs). An eager turn makes none: it runs the walk's program.
  std::shared_ptr<const CompiledTrace> bound;
  std::optional<TraceProgram> unbound;  // an eager turn's program where no binding is kept
  int64_t binding_ns = 0;
  if (node.compiled->symbolic()) {
    if (std::optional<std::vector<int64_t>> key = binding_key(*node.compiled, walk)) {
      bound = node.compiled->bindings->find(*key);
      if (!bound && eager_turn) {
        unbound = walk.program();
        unbound->live = node.compiled->program.live;
      } else if (!bound) {
        const int64_t start = trace_clock_ns();
        bound = make_binding(*node.compiled, walk, *key, statistics);
        binding_ns = std::max<int64_t>(1, trace_clock_ns() - start);
      }
    }
  }
  const CompiledTrace& compiled = bound ? *bound : *node.compiled;
  const TraceProgram& program = unbound ? *unbound : compiled.program;
  lazy::tls_pending = false;
  std::vector<Tensor> values;
  VerifyReference reference;
  // (An unbound eager turn is eager itself: nothing to verify.)
  const bool verify = config().verify && !unbound;
  if (verify) reference = verify_reference(compiled, walk.externals, walk.scalars);
  std::vector<bool> wanted(program.ops.size(), false);
  bool trial_done = false;
  for (size_t i = 0; i < wanted.size() && i < walk.outputs.size(); ++i)
    wanted[i] = !walk.outputs[i].expired();
  {
    profiler::Span span(profiler::Kind::Replay, home_device(compiled.program),
                        [&] { return detail::cat("replay trace ", compiled.id); });
    if (profiler::Event* e = span.event()) {
      e->trace_id = compiled.id;
      e->backend = compiled.executable->backend_name();
      e->kernels = compiled.executable->kernel_count();
      e->ops = static_cast<int>(compiled.program.ops.size());
    }
    const int64_t start = trace_clock_ns();
    if (walk.partial) {  // advance_partial started it: the rest of its parts
      std::unique_ptr<PartialRun> partial = std::move(walk.partial);
      partial->finish(walk.externals, walk.scalars, values, wanted);
    } else if (eager_turn) {
      interpret(program, program.ops.size(), walk.externals, walk.scalars, values);
    } else {
      compiled.executable->run(walk.externals, walk.scalars, values, wanted);
    }
    // A binding's arena goes back to the allocator's cache, for the next size to reuse.
    if (bound) compiled.executable->release_scratch();
    const int64_t took = trace_clock_ns() - start;
    statistics.replay_ns += took;
    statistics.replay_ops += static_cast<int64_t>(program.ops.size());
    trial_done = node.speed.note_replay(eager_turn, took, binding_ns);
  }
  if (verify) verify_replay(compiled, values, reference, walk.scalars, walk.outputs);
  bind_outputs(walk, values);
  ++node.replays;
  // An unbound eager turn ran no compiled trace: none to report.
  std::shared_ptr<const CompiledTrace> ran = bound ? bound : unbound ? nullptr : node.compiled;
  if (trial_done) judge_speed(*walk.anchor, node, statistics);
  return ran;
}

}  // namespace kiln::tracer
