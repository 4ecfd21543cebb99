#include "tracer/lifecycle.h"

#include "runtime/error.h"
#include "tracer/config.h"
#include "tracer/profiler.h"
#include "tracer/statistics.h"
#include "tracer/trace_tree.h"
#include "tracer/walk.h"

namespace kiln::tracer {
namespace {

// Makes the CompiledTrace of the walk's path (hot), or nullptr when no backend takes it.
std::shared_ptr<CompiledTrace> compile_path(const TraceTree& tree, const TraceLifecycle& lifecycle,
                                            const Walk& walk) {
  TraceProgram program = walk.program();
  const int trace_id = lifecycle.compiles() == 0 ? tree.next_trace_id : lifecycle.first_trace_id();
  profiler::Span span(profiler::Kind::Compile, Device(DeviceType::CPU),
                      [&] { return detail::cat("compile trace ", trace_id); });
  const int64_t start = trace_clock_ns();
  std::unique_ptr<Executable> executable = compile_trace(program);
  const double compile_ms = (trace_clock_ns() - start) / 1e6;
  if (!executable) return nullptr;
  if (profiler::Event* e = span.event()) {
    e->trace_id = trace_id;
    e->backend = executable->backend_name();
    e->kernels = executable->kernel_count();
    e->ops = static_cast<int>(program.ops.size());
  }
  auto compiled = std::make_shared<CompiledTrace>();
  compiled->id = trace_id;
  compiled->generation = lifecycle.compiles();
  compiled->site = lifecycle.site();
  compiled->compile_ms = compile_ms;
  for (const TraceOp& op : program.ops)
    for (const TensorGuard& g : op.new_guards) compiled->guards.push_back(g);
  compiled->program = std::move(program);
  compiled->executable = std::move(executable);
  return compiled;
}

// Puts a compiled trace on its node (the walks under the anchor replay it from now on).
void install(TraceTree& tree, Anchor& anchor, TraceNode& node,
             std::shared_ptr<const CompiledTrace> compiled) {
  node.compiled = std::move(compiled);
  for (TraceNode* n = &node; n; n = n->parent) ++n->compiled_below;
  tree.compiled.push_back({&anchor, &node});
}

}  // namespace

const char* trace_state_name(TraceState state) {
  switch (state) {
    case TraceState::Recording:
      return "recording";
    case TraceState::Compiled:
      return "compiled";
    case TraceState::SingleOp:
      return "single op";
    case TraceState::Blacklisted:
      return "blacklisted";
    case TraceState::SlowerThanEager:
      return "slower than eager";
  }
  return "?";
}

void TraceLifecycle::name_by_end(const UserSite& end) {
  if (site_.known() || !end.known()) return;
  site_ = end;
  site_.function = "ends in " + end.function;
}

void TraceLifecycle::transition(TraceState from_a, TraceState from_b, TraceState to) {
  KILN_CHECK(state_ == from_a || state_ == from_b, Error, "[trace] internal error: the trace at ",
             site_.str(), " can't go from ", trace_state_name(state_), " to ",
             trace_state_name(to));
  state_ = to;
}

void TraceLifecycle::on_compile(int trace_id) {
  KILN_CHECK(compiles_ == 0, Error, "[trace] internal error: a recompile taken as a first compile");
  transition(TraceState::Recording, TraceState::Recording, TraceState::Compiled);
  first_trace_id_ = trace_id;
  ++compiles_;
}

bool TraceLifecycle::on_single_op() {
  if (state_ != TraceState::Recording) return false;
  transition(TraceState::Recording, TraceState::Recording, TraceState::SingleOp);
  return true;
}

bool TraceLifecycle::on_recompile(const BreakCause& cause, int limit) {
  ++penalties_;
  last_penalty_ = cause;
  if (penalties_ > limit) {
    transition(TraceState::Recording, TraceState::Compiled, TraceState::Blacklisted);
    return false;
  }
  transition(TraceState::Recording, TraceState::Compiled, TraceState::Compiled);
  ++compiles_;
  return true;
}

void TraceLifecycle::on_evicted() {
  transition(TraceState::Compiled, TraceState::Compiled, TraceState::Recording);
}

void TraceLifecycle::on_slower_than_eager(const BreakCause& cause) {
  transition(TraceState::Compiled, TraceState::Compiled, TraceState::SlowerThanEager);
  eager_cause_ = cause;
}

void on_trace_ended(TraceTree& tree, Anchor& anchor, TraceNode& node, const Walk& walk,
                    TraceStatistics& statistics, const UserSite& end_site) {
  ++node.endings;
  TraceLifecycle& lifecycle = anchor.lifecycle;
  lifecycle.name_by_end(end_site);
  if (node.compiled || lifecycle.stays_eager() || !lifecycle.is_hot(node.endings)) return;
  if (node.depth < 2 && node.compiled_below == 0) {  // one op: nothing to fuse
    if (lifecycle.on_single_op()) {
      const BreakCause cause{BreakReason::SingleOp, op_name(node.op.op)};
      check_break_cause(cause, BreakPhase::Lifecycle);
      log_line(kLogTrace, detail::cat("trace at ", lifecycle.site().str(), " ", cause.message()));
    }
    return;
  }
  std::shared_ptr<CompiledTrace> compiled = compile_path(tree, lifecycle, walk);
  if (!compiled) return;
  if (lifecycle.compiles() == 0) {
    ++tree.next_trace_id;
    lifecycle.on_compile(compiled->id);
    log_line(kLogTrace,
             detail::cat("trace ", compiled->id, " compiled: ", compiled->program.ops.size(),
                         " ops -> ", compiled->executable->kernel_count(), " kernels (",
                         compiled->executable->backend_name(), ", ", compiled->compile_ms,
                         " ms) at ", lifecycle.site().str()));
    install(tree, anchor, node, std::move(compiled));
    return;
  }
  // A recompile: a penalty, with the reason the walk left the last variant.
  BreakCause cause = walk.exit_cause ? *walk.exit_cause : BreakCause{BreakReason::NewVariant, ""};
  check_break_cause(cause, walk.exit_cause ? BreakPhase::Replay : BreakPhase::Lifecycle);
  compiled->recompile_cause = cause;
  const bool keep = lifecycle.on_recompile(cause, config().recompile_limit);
  statistics.note_recompile(*compiled);
  if (!keep) {
    const BreakCause limit{BreakReason::RecompileLimit,
                           detail::cat(lifecycle.penalties(), " times (limit ",
                                       config().recompile_limit, "; KILN_RECOMPILE_LIMIT)")};
    check_break_cause(limit, BreakPhase::Lifecycle);
    statistics.note_eager_anchor(detail::cat("trace ", compiled->id, " at ", lifecycle.site().str(),
                                             " -- abort: ", limit.message()));
    return;
  }
  install(tree, anchor, node, std::move(compiled));
}

}  // namespace kiln::tracer
