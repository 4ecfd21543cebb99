#include "tracer/replay.h"

#include "runtime/error.h"
#include "tracer/backend.h"
#include "tracer/config.h"
#include "tracer/profiler.h"
#include "tracer/side_exit.h"
#include "tracer/speed_check.h"
#include "tracer/verify.h"

namespace kiln::tracer {
void replay_compiled(Walk& walk, TraceNode& node, TraceStatistics& statistics) {
  const CompiledTrace& compiled = *node.compiled;
  lazy::tls_pending = false;
  std::vector<Tensor> values;
  VerifyReference reference;
  if (config().verify) reference = verify_reference(compiled, walk.externals, walk.scalars);
  std::vector<bool> wanted(compiled.program.ops.size(), false);
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
    // The speed trial's eager turn runs the same ops with the eager kernels (same values).
    const bool eager_turn = node.speed.eager_turn(compiled);
    const int64_t start = trace_clock_ns();
    if (eager_turn)
      interpret(compiled.program, compiled.program.ops.size(), walk.externals, walk.scalars,
                values);
    else
      compiled.executable->run(walk.externals, walk.scalars, values, wanted);
    const int64_t took = trace_clock_ns() - start;
    statistics.replay_ns += took;
    statistics.replay_ops += static_cast<int64_t>(compiled.program.ops.size());
    trial_done = node.speed.note_replay(eager_turn, took);
  }
  if (config().verify) verify_replay(compiled, values, reference, walk.scalars, walk.outputs);
  bind_outputs(walk, values);
  ++node.replays;
  if (trial_done) judge_speed(*walk.anchor, node, statistics);
}

}  // namespace kiln::tracer
