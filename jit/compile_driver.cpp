// The compile loop both JIT backends share (see compile_driver.h).
#include "jit/compile_driver.h"

#include <chrono>
#include <set>

#include "jit/pipeline.h"
#include "tracer/config.h"

namespace kiln::jit {

using tracer::TraceProgram;

std::unique_ptr<tracer::Executable> JitBackend::compile(const TraceProgram& program) {
  if (!accepts(program)) return nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  DebugDump dump;
  const PassSet switched_off = disabled_passes();
  PassSet disabled = switched_off;  // and the target passes that failed for this trace
  std::set<int> banned;             // ops of groups that failed: they run eagerly
  std::vector<std::string> fallbacks;
  for (;;) {
    std::unique_ptr<KernelBuild> build = start(program, dump);
    FusionOptions options = fusable_except(target_, banned);
    options.disabled = disabled;
    options.attention = attention_kernels(target_);
    options.fold_epilogues = [&build](const TraceProgram& p, FusionPlan& plan) {
      build->fold_epilogues(p, plan);
    };
    FusionPlan plan;
    try {
      plan = plan_fusion(program, options);
    } catch (const PassFailed& e) {
      disabled.add(e.pass);
      fallbacks.push_back(e.what());
      continue;
    }

    // Lower and generate each kernel group; one that fails runs eagerly.
    std::string kernel_text;
    std::vector<size_t> kernel_steps;
    bool retry = false;
    for (size_t s = 0; s < plan.steps.size() && !retry; ++s) {
      const Step& step = plan.steps[s];
      if (step.kind != Step::Kind::Kernel) continue;
      try {
        LoweredKernel lowered =
            lower_group(program, plan, step.group, !disabled.has(Pass::Simplify));
        // The kernels' text for KILN_DEBUG_DIR only (a binding to new sizes skips it).
        if (dump.active())
          kernel_text += "step " + std::to_string(s) + " shape " + dims_str(lowered.shape) + ":\n" +
                         lowered.kernel.text();
        build->add(s, step.group, std::move(lowered));
        kernel_steps.push_back(s);
      } catch (const std::exception& e) {
        for (int i : step.group.ops) banned.insert(i);
        fallbacks.push_back(eager_fallback_note(s, e));
        retry = true;
      }
    }
    if (retry) continue;

    // Compile the batch; if that fails every fused group runs eagerly.
    try {
      build->group_launches(program, plan);
      build->finish();
    } catch (const std::exception& e) {
      for (size_t s : kernel_steps)
        for (int i : plan.steps[s].group.ops) banned.insert(i);
      fallbacks.push_back(std::string("fused kernels fell back to eager kernels: ") + e.what());
      tracer::log_line(tracer::kLogTrace, fallbacks.back());
      continue;
    }

    plan.notes.insert(plan.notes.end(), fallbacks.begin(), fallbacks.end());
    if (!switched_off.empty())
      plan.notes.push_back("passes switched off (KILN_JIT_DISABLE): " + switched_off.str());
    MemoryPlan memory = plan_memory(program, plan);
    if (dump.active()) {
      dump.write_plan(program, plan, memory, kernel_text);
      build->dump(dump);
      dump.write("compile.txt",
                 build->compile_report() + "total: " + std::to_string(ms_since(t0)) + " ms\n");
    }
    return build->instantiate(program, std::move(plan), std::move(memory));
  }
}

}  // namespace kiln::jit
