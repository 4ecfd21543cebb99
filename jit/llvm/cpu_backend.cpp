// The CPU trace backend: TraceProgram -> FusionPlan -> one LLVM kernel per fusion group
// (library calls for the rest) -> FusedCpuTrace, the Executable the recorder replays.
// A group that cannot be lowered or compiled is split back into eager steps and noted;
// a program with no CPU ops is declined (another backend, or the interpreter, takes it).
#include <chrono>
#include <set>

#include "jit/debug_dump.h"
#include "jit/fused_trace.h"
#include "jit/fusion.h"
#include "jit/llvm/llvm_jit.h"
#include "jit/lower.h"
#include "jit/memory_plan.h"
#include "ops/dispatch.h"
#include "runtime/parallel.h"
#include "tracer/config.h"
#include "tracer/profiler.h"

namespace kiln::jit::llvm_backend {
namespace {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

struct CompiledKernel {
  LoweredKernel lowered;
  KernelFn fn = nullptr;
  std::shared_ptr<const void> pin;  // keeps fn's code linked (LlvmJit's LRU)
  std::vector<int64_t> strides;     // flattened per operand
  int64_t grain = 1;
};

class FusedCpuTrace final : public FusedTrace {
 public:
  FusedCpuTrace(TraceProgram program, FusionPlan plan, MemoryPlan memory,
                std::vector<std::unique_ptr<CompiledKernel>> kernels)
      : FusedTrace(std::move(program), std::move(plan), std::move(memory)),
        kernels_(std::move(kernels)) {}

  void run(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
           std::vector<Tensor>& values, const std::vector<bool>& wanted) const override {
    if (must_interpret(wanted)) {
      tracer::interpret(program_, program_.ops.size(), externals, scalars, values);
      return;
    }
    std::vector<Tensor> v(program_.ops.size());
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      const Step& step = plan_.steps[s];
      if (step.kind != Step::Kind::Kernel) {
        run_eager_step(
            step, externals, scalars, v,
            step.kind == Step::Kind::Library ? output_for(step.op, externals, v) : Tensor());
        continue;
      }
      const CompiledKernel& k = *kernels_[s];
      for (int i : step.group.ops)
        if (plan_.materialized[i]) v[i] = output_for(i, externals, v);
      if (k.lowered.work == 0) continue;
      // Small traces (nearly all) keep their arguments on the stack.
      const size_t nops = k.lowered.operands.size(), nsc = k.lowered.scalar_slots.size();
      void* ptr_buf[64];
      int64_t sc_buf[32];
      std::vector<void*> ptr_heap(nops > 64 ? nops : 0);
      std::vector<int64_t> sc_heap(nsc > 32 ? nsc : 0);
      void** p = nops > 64 ? ptr_heap.data() : ptr_buf;
      int64_t* scp = nsc > 32 ? sc_heap.data() : sc_buf;
      for (size_t o = 0; o < nops; ++o)
        p[o] = resolve(k.lowered.operands[o].source, externals, v).data_ptr();
      scalar_payloads(k.lowered.scalar_slots, k.lowered.kernel.scalar_is_float, scalars, scp);
      const int64_t* shape = k.lowered.shape.data();
      const int64_t* strides = k.strides.data();
      KernelFn fn = k.fn;
      profiler::Span span(profiler::Kind::Kernel, Device(DeviceType::CPU), [&] {
        std::string name = "llvm kernel ";
        for (size_t g = 0; g < step.group.ops.size(); ++g)
          name += (g ? "+" : "") + std::string(op_name(program_.ops[step.group.ops[g]].op));
        return name;
      });
      parallel_for(0, k.lowered.work, k.grain,
                   [&](int64_t b, int64_t e) { fn(p, shape, strides, scp, b, e); });
    }
    hand_out(values, v, wanted);
  }

  const char* backend_name() const override { return "llvm"; }

 private:
  std::vector<std::unique_ptr<CompiledKernel>> kernels_;  // per step (null: not a kernel)
};

class LlvmCpuBackend final : public tracer::TraceBackend {
 public:
  std::unique_ptr<tracer::Executable> compile(const TraceProgram& program) override {
    for (const TraceOp& op : program.ops)
      if (!op.meta.device.is_cpu()) return nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    DebugDump dump;
    std::set<int> banned;
    std::vector<std::string> fallbacks;
    for (int attempt = 0;; ++attempt) {
      FusionPlan plan = plan_fusion(program, fusable_except(DeviceType::CPU, banned));
      std::vector<std::unique_ptr<CompiledKernel>> kernels(plan.steps.size());
      std::string kernel_text, timings;
      bool retry = false;
      for (size_t s = 0; s < plan.steps.size() && !retry; ++s) {
        const Step& step = plan.steps[s];
        if (step.kind != Step::Kind::Kernel) continue;
        auto k = std::make_unique<CompiledKernel>();
        try {
          k->lowered = lower_group(program, plan, step.group);
          const KernelBinary bin = LlvmJit::instance().get(k->lowered.kernel, dump.active());
          k->fn = bin.fn;
          k->pin = bin.pin;
          static const char* const sources[] = {"memory", "disk cache", "compiled"};
          timings += "kernel " + std::to_string(s) + ": " + std::to_string(bin.ms) + " ms (" +
                     sources[static_cast<int>(bin.source)] + "), vector width " +
                     std::to_string(bin.vector_width) + " bits\n";
          if (dump.active()) dump.write("kernel-" + std::to_string(s) + ".ll", bin.llvm_ir);
          kernel_text += "step " + std::to_string(s) + " shape " + dims_str(k->lowered.shape) +
                         ":\n" + k->lowered.kernel.text();
        } catch (const std::exception& e) {
          // This group runs eagerly: ban its ops and plan again.
          for (int i : step.group.ops) banned.insert(i);
          fallbacks.push_back(eager_fallback_note(s, e));
          retry = true;
          break;
        }
        for (const OperandBinding& o : k->lowered.operands)
          k->strides.insert(k->strides.end(), o.strides.begin(), o.strides.end());
        const int64_t per_unit =
            step.group.reduced_dims ? std::max<int64_t>(k->lowered.cols, 1) : 1;
        k->grain = std::max<int64_t>(1, (1 << 15) / per_unit);
        kernels[s] = std::move(k);
      }
      if (retry) continue;
      plan.notes.insert(plan.notes.end(), fallbacks.begin(), fallbacks.end());
      MemoryPlan memory = plan_memory(program, plan);
      if (dump.active()) {
        dump.write_plan(program, plan, memory, kernel_text);
        dump.write("compile.txt", "host: " + LlvmJit::instance().host() +
                                      "\ncache: " + LlvmJit::instance().cache_dir() + "\n" +
                                      timings + "total: " + std::to_string(ms_since(t0)) + " ms\n");
      }
      return std::make_unique<FusedCpuTrace>(program, std::move(plan), std::move(memory),
                                             std::move(kernels));
    }
  }
};

struct Registration {
  Registration() {
    static LlvmCpuBackend backend;
    tracer::register_backend(&backend);
  }
} registration;

}  // namespace
}  // namespace kiln::jit::llvm_backend
