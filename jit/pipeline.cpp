// The pipeline's plan passes, in order (see pipeline.h).
#include "jit/pipeline.h"

#include <cstdio>
#include <mutex>

#include "jit/attention_rewrite.h"
#include "jit/plan_passes.h"
#include "runtime/error.h"
#include "tracer/config.h"

namespace kiln::jit {
namespace {

using tracer::TraceProgram;
using PassFn = void (*)(const TraceProgram&, const FusionOptions&, FusionPlan&);

void fold_epilogues(const TraceProgram& program, const FusionOptions& options, FusionPlan& plan) {
  if (options.fold_epilogues) options.fold_epilogues(program, plan);
}

struct PlanPass {
  Pass pass;
  PassFn run;
  PassFn instead;  // what runs when the pass is switched off (nullptr: nothing)
};

constexpr PlanPass kPlanPasses[] = {
    {Pass::Cse, eliminate_common_subexpressions, nullptr},
    {Pass::Dce, eliminate_dead_code, nullptr},
    {Pass::Fuse, group_into_kernels, one_kernel_per_op},
    {Pass::Store, mark_stored, nullptr},
    {Pass::Attention, rewrite_attention, nullptr},
    {Pass::Epilogue, fold_epilogues, nullptr},
};

}  // namespace

FusionPlan plan_fusion(const TraceProgram& program, const FusionOptions& options) {
  FusionPlan plan = unplanned(program);
  for (const PlanPass& p : kPlanPasses) {
    const PassFn run = options.disabled.has(p.pass) ? p.instead : p.run;
    if (run) run(program, options, plan);
  }
  return plan;
}

PassSet disabled_passes() {
  const std::vector<std::string>& names = tracer::config().jit_disable;
  if (names.empty()) return PassSet();
  try {
    return parse_pass_names(names);
  } catch (const ValueError& e) {
    static std::mutex mutex;
    static std::vector<std::string> reported;
    std::lock_guard<std::mutex> lock(mutex);
    if (reported != names) {
      reported = names;
      std::fprintf(stderr, "[kiln] ignoring KILN_JIT_DISABLE: %s\n", e.what());
    }
    return PassSet();
  }
}

}  // namespace kiln::jit
