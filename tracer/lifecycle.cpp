#include "tracer/lifecycle.h"

#include <algorithm>
#include <vector>

#include "runtime/error.h"
#include "tracer/config.h"
#include "tracer/profiler.h"
#include "tracer/statistics.h"
#include "tracer/symbolic_shapes.h"
#include "tracer/trace_tree.h"
#include "tracer/walk.h"
#include "tracer/warm_start.h"

namespace kiln::tracer {
namespace {

// Records a compile on this thread's profiler: a span around a synchronous compile, or,
// for one that ran in the background, an event with the compile thread's times (start
// and end moved onto the sink's clock) when the result is installed.
void note_compile_event(const CompiledTrace& compiled, int64_t start_ns, int64_t end_ns) {
  profiler::EventSink* sink = profiler::tls_active;
  if (!sink) return;
  const size_t i = sink->begin(profiler::Kind::Compile, detail::cat("compile trace ", compiled.id),
                               Device(DeviceType::CPU));
  sink->end(i);
  profiler::Event& e = sink->event(i);
  const int64_t now = trace_clock_ns();
  e.end_ns = std::max<int64_t>(0, e.end_ns - (now - end_ns));
  e.start_ns = std::max<int64_t>(0, e.start_ns - (now - start_ns));
  e.trace_id = compiled.id;
  e.backend = compiled.executable->backend_name();
  e.kernels = compiled.executable->kernel_count();
  e.ops = static_cast<int>(compiled.program.ops.size());
}

// The CompiledTrace of a compile's result (its id taken now, on the user's thread).
std::shared_ptr<CompiledTrace> make_compiled(const TraceTree& tree, const TraceLifecycle& lifecycle,
                                             TraceProgram program, CompileResult& result) {
  auto compiled = std::make_shared<CompiledTrace>();
  compiled->id = lifecycle.compiles() == 0 ? tree.next_trace_id : lifecycle.first_trace_id();
  compiled->generation = lifecycle.compiles();
  compiled->site = lifecycle.site();
  compiled->compile_ms = result.ms();
  for (const TraceOp& op : program.ops)
    for (const TensorGuard& g : op.new_guards) compiled->guards.push_back(g);
  compiled->program = std::move(program);
  compiled->executable = std::move(result.executable);
  if (is_symbolic(compiled->program)) {
    compiled->symbol_values = symbol_values_of(compiled->program);
    compiled->index_values = index_values_of(compiled->program);
    compiled->symbolic_why = describe_symbols(compiled->program);
    compiled->bindings = std::make_shared<SizeBindings>();
  }
  return compiled;
}

// The path of a symbolic trace: its ops with their symbolic guards, under the anchor's
// root beside the exact paths recorded at each size (created, or found when it exists).
TraceNode& symbolic_path(TraceTree& tree, Anchor& anchor, const TraceProgram& program) {
  TraceNode* n = &anchor.root;
  for (const TraceOp& op : program.ops) {
    TraceNode* next = n->find_child(op);
    if (!next) {
      next = n->add_child(op);
      ++tree.nodes;
    }
    next->last_use = tree.tick;
    n = next;
  }
  anchor.symbolic = true;
  return *n;
}

// Takes a compiled trace off its node (one that a symbolic variant subsumes: a walk
// follows one path of the trie, so two variants that both pass an input must not share
// an anchor, or the walk may commit to the one whose later guard fails).
void uninstall(TraceTree& tree, TraceNode& node) {
  node.compiled.reset();
  for (TraceNode* n = &node; n; n = n->parent) --n->compiled_below;
  std::erase_if(tree.compiled, [&](const TraceTree::CompiledAt& c) { return c.node == &node; });
}

// Puts a compiled trace on its node (the walks under the anchor replay it from now on); a
// symbolic one on its own path, in place of the variants it subsumes.
void install(TraceTree& tree, Anchor& anchor, TraceNode& recorded,
             std::shared_ptr<const CompiledTrace> compiled) {
  if (compiled->symbolic()) {
    std::vector<TraceNode*> subsumed;
    for (const TraceTree::CompiledAt& c : tree.compiled)
      if (c.anchor == &anchor && subsumes(compiled->program, c.node->compiled->program))
        subsumed.push_back(c.node);
    for (TraceNode* n : subsumed) uninstall(tree, *n);
  }
  TraceNode& node =
      compiled->symbolic() ? symbolic_path(tree, anchor, compiled->program) : recorded;
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
    case TraceState::CompileFailed:
      return "compile failed";
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

void TraceLifecycle::on_compile_failed(const BreakCause& cause) {
  transition(TraceState::Recording, TraceState::Recording, TraceState::CompileFailed);
  eager_cause_ = cause;
}

namespace {

// A compile that threw: the anchor stays eager when it was its first, else the variant
// stays uncompiled; reported in explain() and the logs either way.
void on_failed(Anchor& anchor, TraceNode& node, const std::string& error,
               TraceStatistics& statistics) {
  TraceLifecycle& lifecycle = anchor.lifecycle;
  node.compile_failed = true;
  const BreakCause cause{BreakReason::CompileFailed, error};
  check_break_cause(cause, BreakPhase::Lifecycle);
  if (lifecycle.state() == TraceState::Recording && lifecycle.compiles() == 0)
    lifecycle.on_compile_failed(cause);
  statistics.note_eager_anchor(detail::cat("trace at ", lifecycle.site().str(), " (", node.depth,
                                           " ops) -- abort: ", cause.message()));
}

// What the compile of the path to `node` made, installed (the part of the policy after
// the compile, the same in both modes).
void on_compiled(TraceTree& tree, Anchor& anchor, TraceNode& node, TraceProgram program,
                 CompileResult result, const std::optional<BreakCause>& exit_cause,
                 TraceStatistics& statistics, CompileOrigin origin) {
  static constexpr const char* kOrigins[] = {"", ", in the background",
                                             ", from the warm-start store"};
  TraceLifecycle& lifecycle = anchor.lifecycle;
  if (!result.error.empty()) {
    on_failed(anchor, node, result.error, statistics);
    return;
  }
  if (!result.executable || lifecycle.stays_eager()) return;
  std::shared_ptr<CompiledTrace> compiled =
      make_compiled(tree, lifecycle, std::move(program), result);
  if (origin != CompileOrigin::OnThread)
    note_compile_event(*compiled, result.start_ns, result.end_ns);
  if (lifecycle.compiles() == 0) {
    ++tree.next_trace_id;
    lifecycle.on_compile(compiled->id);
    log_line(kLogTrace,
             detail::cat(
                 "trace ", compiled->id, " compiled: ", compiled->program.ops.size(), " ops -> ",
                 compiled->executable->kernel_count(), " kernels (",
                 compiled->executable->backend_name(), ", ", compiled->compile_ms, " ms",
                 kOrigins[static_cast<int>(origin)], ") at ", lifecycle.site().str(),
                 compiled->symbolic() ? "; symbolic: " + compiled->symbolic_why : std::string()));
    // A symbolic trace is not stored (persist.h keeps exact guards only).
    if (origin != CompileOrigin::Stored && !compiled->symbolic())
      WarmStart::save(anchor, *compiled);
    install(tree, anchor, node, std::move(compiled));
    return;
  }
  // A recompile: a penalty, with the reason the walk left the last variant.
  BreakCause cause = exit_cause ? *exit_cause : BreakCause{BreakReason::NewVariant, ""};
  check_break_cause(cause, exit_cause ? BreakPhase::Replay : BreakPhase::Lifecycle);
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
  if (origin != CompileOrigin::Stored) WarmStart::save(anchor, *compiled);
  install(tree, anchor, node, std::move(compiled));
}

}  // namespace

namespace {

TraceProgram program_of(const TraceNode& node) {
  TraceProgram p;
  for (const TraceOp* op : node.path()) {
    p.ops.push_back(*op);
    p.num_scalars += static_cast<int>(op->scalar_kinds.size());
    p.num_externals += static_cast<int>(op->new_guards.size());
  }
  p.live.resize(p.ops.size());
  return p;
}

// The paths of an anchor that are the same trace as `now` but for sizes (symbolic_shapes.h):
// whether one is compiled, the endings of those recorded, and now's guards generalized
// against the first that allows it (else why not).
struct SizeClass {
  bool compiled_peer = false;
  int64_t endings = 0;
  std::optional<Generalized> general;
  GeneralizeFailure failure = GeneralizeFailure::Structure;
};

SizeClass size_class(const TraceTree& tree, const Anchor& anchor, const TraceNode& node,
                     const TraceProgram& now) {
  SizeClass c;
  c.endings = node.endings;
  // CUDA traces stay specialised per size (symbolic_shapes.h).
  if (!config().symbolic_shapes || !home_device(now).is_cpu()) return c;
  auto consider = [&](const TraceProgram& peer, bool compiled, int64_t endings) {
    GeneralizeFailure why = GeneralizeFailure::Structure;
    std::optional<Generalized> g = generalize(peer, now, &why);
    if (!g && (why == GeneralizeFailure::Structure || why == GeneralizeFailure::NothingDiffers))
      return;
    if (compiled)
      c.compiled_peer = true;
    else
      c.endings += endings;
    if (g && !c.general)
      c.general = std::move(g);
    else if (!g && c.failure != GeneralizeFailure::ZeroOrOne)
      c.failure = why;
  };
  for (const TraceTree::CompiledAt& at : tree.compiled)
    if (at.anchor == &anchor) consider(at.node->compiled->program, true, 0);
  // Recorded paths of the same length where traces ended (a bounded search).
  std::vector<const TraceNode*> stack = {&anchor.root};
  for (int visited = 0; !stack.empty() && visited < 4096; ++visited) {
    const TraceNode* n = stack.back();
    stack.pop_back();
    if (n->depth == node.depth) {
      if (n != &node && n->endings > 0 && !n->compiled) consider(program_of(*n), false, n->endings);
      continue;
    }
    for (const auto& child : n->children) stack.push_back(child.get());
  }
  return c;
}

}  // namespace

void on_trace_ended(TraceTree& tree, Anchor& anchor, TraceNode& node, const Walk& walk,
                    TraceStatistics& statistics, const UserSite& end_site, bool provisional) {
  ++node.endings;
  TraceLifecycle& lifecycle = anchor.lifecycle;
  lifecycle.name_by_end(end_site);
  if (node.compiled || node.compile_failed || lifecycle.stays_eager()) return;
  // A compile of this anchor is running: no second one (nor a recompile counted) until
  // it is installed; this path's endings go on counting.
  if (anchor.pending) return;
  if (provisional && node.endings < kProvisionalEndings) return;
  bool hot = lifecycle.is_hot(node.endings);
  // Sizes: a path that is a compiled variant but for its sizes compiles at once, with the
  // dims that differ symbolic (or, for sizes 0 and 1, exactly: a specialisation); paths
  // that differ only in sizes count their endings together. Looked at while the path
  // warms up (at most hot_threshold() times per path).
  std::optional<TraceProgram> now;
  std::optional<Generalized> general;
  if (hot || node.endings <= lifecycle.hot_threshold()) {
    now = walk.program();
    SizeClass c = size_class(tree, anchor, node, *now);
    if (c.general && (hot || c.compiled_peer || lifecycle.is_hot(c.endings))) {
      hot = true;
      general = std::move(c.general);
    } else if (c.compiled_peer && c.failure == GeneralizeFailure::ZeroOrOne) {
      hot = true;
    }
  }
  if (anchor.root.compiled_below == 0 &&
      anchor.fresh_paths.on_ending(node.endings, hot, tree.tick)) {
    ++statistics.fresh_path_suspensions;
    log_line(kLogTrace, detail::cat("trace at ", lifecycle.site().str_exact(), ": ",
                                    FreshPathPenalty::kFreshWalks,
                                    " walks in a row each took a new path: recording "
                                    "suspended, eager for the next ",
                                    anchor.fresh_paths.penalty(), " walks"));
  }
  if (!hot) return;
  if (node.depth < 2 && node.compiled_below == 0) {  // one op: nothing to fuse
    if (lifecycle.on_single_op()) {
      const BreakCause cause{BreakReason::SingleOp, op_name(node.op.op)};
      check_break_cause(cause, BreakPhase::Lifecycle);
      log_line(kLogTrace, detail::cat("trace at ", lifecycle.site().str(), " ", cause.message()));
    }
    return;
  }
  TraceProgram program = now ? std::move(*now) : walk.program();
  if (general) {
    set_guards(program, general->guards);
    set_bounds(program, general->bounds);
  } else {
    // A path that follows a symbolic variant's prefix and then left it: its later ops
    // read values of any size the prefix passed, so its guards keep the prefix's symbols
    // (the trace is symbolic, bound per size), never a plan of this walk's sizes alone.
    const std::vector<const TraceOp*> path = node.path();
    for (size_t i = 0; i < path.size() && i < program.ops.size(); ++i) {
      if (path[i]->bounds.any()) program.ops[i].bounds = path[i]->bounds;
      for (size_t k = 0; k < path[i]->new_guards.size(); ++k)
        if (path[i]->new_guards[k].symbolic()) {
          program.ops[i].new_guards[k].symbols = path[i]->new_guards[k].symbols;
          program.ops[i].new_guards[k].derived_strides = path[i]->new_guards[k].derived_strides;
        }
    }
  }
  if (config().background_compile) {
    anchor.pending = std::make_shared<CompileJob>(std::move(program), walk.exit_cause);
    anchor.pending_node = &node;
    submit_compile(anchor.pending);
    return;
  }
  CompileResult result;
  {
    const int trace_id =
        lifecycle.compiles() == 0 ? tree.next_trace_id : lifecycle.first_trace_id();
    profiler::Span span(profiler::Kind::Compile, Device(DeviceType::CPU),
                        [&] { return detail::cat("compile trace ", trace_id); });
    result = compile_program(program);
    if (profiler::Event* e = span.event(); e && result.executable) {
      e->trace_id = trace_id;
      e->backend = result.executable->backend_name();
      e->kernels = result.executable->kernel_count();
      e->ops = static_cast<int>(program.ops.size());
    }
  }
  on_compiled(tree, anchor, node, std::move(program), std::move(result), walk.exit_cause,
              statistics, CompileOrigin::OnThread);
}

void forget_endings(Anchor& anchor) {
  std::vector<TraceNode*> stack{&anchor.root};
  while (!stack.empty()) {
    TraceNode* n = stack.back();
    stack.pop_back();
    if (!n->compiled && n != anchor.pending_node) n->endings = 0;
    for (const auto& c : n->children) stack.push_back(c.get());
  }
}

bool take_finished_compile(TraceTree& tree, Anchor& anchor, TraceStatistics& statistics,
                           bool wait) {
  if (!anchor.pending) return false;
  if (wait) anchor.pending->wait();
  if (anchor.pending->skipped()) {  // never ran (a forked child): the path compiles again
    anchor.pending.reset();
    anchor.pending_node = nullptr;
    return false;
  }
  if (!anchor.pending->done()) return false;
  std::shared_ptr<CompileJob> job = std::move(anchor.pending);
  TraceNode* node = anchor.pending_node;
  anchor.pending_node = nullptr;
  on_compiled(tree, anchor, *node, job->program(), job->take(), job->exit_cause(), statistics,
              CompileOrigin::Background);
  return true;
}

void install_stored_trace(TraceTree& tree, Anchor& anchor, TraceNode& node, TraceProgram program,
                          CompileResult result, TraceStatistics& statistics) {
  on_compiled(tree, anchor, node, std::move(program), std::move(result), std::nullopt, statistics,
              CompileOrigin::Stored);
}

}  // namespace kiln::tracer
