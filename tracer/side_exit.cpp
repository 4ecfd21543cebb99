#include "tracer/side_exit.h"

#include <string>

#include "runtime/error.h"
#include "tracer/config.h"
#include "tracer/profiler.h"
#include "tracer/statistics.h"

namespace kiln::tracer {
namespace {

// What a lazy value the user holds points to once the walk that owed it failed.
struct FailedValue final : PendingValue {
  std::string why;
  const char* failure() const override { return why.c_str(); }
};

// Counts the side exit on the compiled trace the walk was following.
void charge_side_exit(TraceNode* from) {
  for (TraceNode* n = from; n;) {
    if (n->compiled) {
      ++n->side_exits;
      return;
    }
    TraceNode* next = nullptr;
    for (const auto& c : n->children)
      if (c->compiled_below > 0) next = c.get();
    n = next;
  }
}

}  // namespace

void side_exit(Walk& walk, const BreakCause& cause) {
  check_break_cause(cause, BreakPhase::Replay);
  walk.exit_cause = cause;
  charge_side_exit(walk.node);
  if (logging(kLogGuards)) {
    log_line(kLogGuards,
             detail::cat("trace at ", walk.anchor->lifecycle.site().str(), " side exit after op ",
                         walk.node->depth, " -- ", cause.message()));
  }
  try {
    materialize(walk, static_cast<size_t>(walk.at_root() ? 0 : walk.node->depth));
  } catch (...) {
    fail_pending_values(walk, std::current_exception());
    walk.clear();
    throw;
  }
  walk.mode = WalkMode::Record;
}

void materialize(Walk& walk, size_t count) {
  lazy::tls_pending = false;
  if (count == 0) return;
  WalkBoundaryScope boundary(walk.in_boundary);
  const TraceProgram program = walk.program();
  profiler::Span span(profiler::Kind::Materialize, home_device(program), [&] {
    return detail::cat("materialize ", count, " op(s) eagerly (trace at ",
                       walk.anchor->lifecycle.site().str(), ")");
  });
  std::vector<Tensor> values;
  const int64_t start = trace_clock_ns();
  // A pipelined replay (replay.h) ran its first parts already: the rest from their values.
  size_t done = 0;
  if (walk.partial) {
    std::unique_ptr<PartialRun> partial = std::move(walk.partial);
    done = partial->abandon(walk.externals, values);
  }
  interpret_from(program, done, count, walk.externals, walk.scalars, values);
  walk.eager_ns += trace_clock_ns() - start;
  bind_outputs(walk, values);
}

void bind_outputs(const Walk& walk, const std::vector<Tensor>& values) {
  for (size_t i = 0; i < walk.outputs.size() && i < values.size(); ++i) {
    std::shared_ptr<TensorImpl> impl = walk.outputs[i].lock();
    if (!impl || impl->storage || !values[i].defined()) continue;
    const TensorImpl* v = values[i].impl();
    impl->storage = v->storage;
    impl->offset = v->offset;
    impl->sizes = v->sizes;
    impl->strides = v->strides;
    impl->refresh();
    impl->pending.reset();
  }
}

void fail_pending_values(const Walk& walk, std::exception_ptr error) {
  auto failed = std::make_shared<FailedValue>();
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    failed->why = e.what();
  } catch (...) {
    failed->why = "an exception that is not a std::exception";
  }
  for (const std::weak_ptr<TensorImpl>& w : walk.outputs) {
    if (std::shared_ptr<TensorImpl> impl = w.lock(); impl && !impl->storage) impl->pending = failed;
  }
}

}  // namespace kiln::tracer
