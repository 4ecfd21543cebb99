// The CPU trace backend: for the compile driver (jit/compile_driver.h), one LLVM kernel
// per fusion group, compiled as the driver hands it over (library calls for the rest);
// its Executable is FusedCpuTrace, run step by step, each kernel parallel over the cores.
// A program not entirely on the CPU is declined (another backend, or the interpreter,
// takes it).
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "jit/compile_driver.h"
#include "jit/fused_trace.h"
#include "jit/llvm/llvm_jit.h"
#include "ops/dispatch.h"
#include "runtime/parallel.h"
#include "tracer/background_compile.h"
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
        if (plan_.stored[i]) v[i] = output_for(i, externals, v);
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
        p[o] = k.lowered.kernel.operands[o].index_only
                   ? nullptr
                   : resolve(k.lowered.operands[o].source, externals, v).data_ptr();
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

// One attempt's LLVM kernels: add() takes each kernel from the in-memory table or the
// disk cache when it is there, and leaves the rest to finish(), which compiles them on up
// to kCompileThreads threads at once (the calling thread one of them; LlvmJit compiles
// outside its lock). With KILN_LLVM_JIT_FAIL add() compiles (fails) at once, so that the
// group alone runs eagerly, as a failed compile did before.
constexpr unsigned kCompileThreads = 8;

class LlvmKernelBuild final : public KernelBuild {
 public:
  explicit LlvmKernelBuild(const DebugDump& dump) : dump_(dump) {}

  void add(size_t s, const FusionGroup& group, LoweredKernel lowered) override {
    auto k = std::make_unique<CompiledKernel>();
    k->lowered = std::move(lowered);
    if (LlvmJit::compile_refused()) take(s, *k, LlvmJit::instance().get(k->lowered.kernel, false));
    for (const OperandBinding& o : k->lowered.operands)
      k->strides.insert(k->strides.end(), o.strides.begin(), o.strides.end());
    const int64_t per_unit = group.reduced_dims ? std::max<int64_t>(k->lowered.cols, 1) : 1;
    k->grain = std::max<int64_t>(1, (1 << 15) / per_unit);
    if (kernels_.size() <= s) kernels_.resize(s + 1);
    kernels_[s] = std::move(k);
  }

  void finish() override {
    // Each different kernel compiles once: steps whose kernels have the same text (a
    // layer's kernels in every layer) wait for it rather than compile it beside it.
    std::vector<size_t> todo;
    std::vector<const std::string*> texts;          // per todo entry: its kernel's text
    std::vector<std::pair<size_t, size_t>> copies;  // (step, index in todo it takes)
    std::unordered_map<std::string, size_t> first;
    for (size_t s = 0; s < kernels_.size(); ++s) {
      if (!kernels_[s] || kernels_[s]->fn) continue;
      auto [it, added] = first.emplace(kernels_[s]->lowered.kernel.text(), todo.size());
      if (added) {
        todo.push_back(s);
        texts.push_back(&it->first);
      } else {
        copies.emplace_back(s, it->second);
      }
    }
    std::vector<KernelBinary> bins(todo.size());
    // Kernels already loaded are taken here; threads start only for the rest (a trace
    // bound to new sizes finds all of its kernels loaded: no thread to start and join).
    std::vector<size_t> missing;
    for (size_t i = 0; i < todo.size(); ++i) {
      std::optional<KernelBinary> hit;
      if (!dump_.active()) hit = LlvmJit::instance().find_loaded(*texts[i]);
      if (hit)
        bins[i] = std::move(*hit);
      else
        missing.push_back(i);
    }
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto work = [&] {
      for (size_t m; (m = next.fetch_add(1)) < missing.size();) {
        const size_t i = missing[m];
        try {
          bins[i] =
              LlvmJit::instance().get(kernels_[todo[i]]->lowered.kernel, dump_.active(), texts[i]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      }
    };
    // Read once: hardware_concurrency() parses /sys on every call (most of a binding's
    // finish() when it was asked per plan).
    static const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    // Beside the user's loop (the background compile thread) half the cores, so that the
    // eager steps meanwhile keep the other half: on this project's 2-core VMs, the GPT
    // step's compile on both cores made those steps 3.6x slower (it landed 6 steps
    // sooner); on one, 1.3-1.9x (docs/results/llvm_compile_time_cpu.txt).
    const unsigned width = tracer::on_compile_thread() ? std::max(1u, cores / 2) : cores;
    const size_t helpers =
        std::min<size_t>({missing.size() ? missing.size() - 1 : 0, kCompileThreads - 1, width - 1});
    std::vector<std::thread> threads;
    for (size_t t = 0; t < helpers; ++t) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
    if (error) std::rethrow_exception(error);
    for (size_t i = 0; i < todo.size(); ++i) take(todo[i], *kernels_[todo[i]], bins[i]);
    for (const auto& [s, i] : copies) {
      KernelBinary same = bins[i];
      same.source = KernelBinary::Source::Memory;
      same.ms = 0;
      take(s, *kernels_[s], same);
    }
  }

  std::string compile_report() const override {
    return "host: " + LlvmJit::instance().host() + "\ncache: " + LlvmJit::instance().cache_dir() +
           "\n" + timings_;
  }

  std::unique_ptr<tracer::Executable> instantiate(const TraceProgram& program, FusionPlan plan,
                                                  MemoryPlan memory) override {
    kernels_.resize(plan.steps.size());
    return std::make_unique<FusedCpuTrace>(program, std::move(plan), std::move(memory),
                                           std::move(kernels_));
  }

 private:
  // Step s's kernel is bin: its entry point, the timing line, the IR dump.
  void take(size_t s, CompiledKernel& k, const KernelBinary& bin) {
    k.fn = bin.fn;
    k.pin = bin.pin;
    if (!dump_.active()) return;  // the timing lines are compile.txt's (KILN_DEBUG_DIR)
    static const char* const sources[] = {"memory", "disk cache", "compiled"};
    timings_ += "kernel " + std::to_string(s) + ": " + std::to_string(bin.ms) + " ms (" +
                sources[static_cast<int>(bin.source)] + "), vector width " +
                std::to_string(bin.vector_width) + " bits\n";
    dump_.write("kernel-" + std::to_string(s) + ".ll", bin.llvm_ir);
  }

  const DebugDump& dump_;
  std::vector<std::unique_ptr<CompiledKernel>> kernels_;  // per step (null: not a kernel)
  std::string timings_;
};

class LlvmCpuBackend final : public JitBackend {
 public:
  LlvmCpuBackend() : JitBackend(DeviceType::CPU) {}

 protected:
  bool accepts(const TraceProgram& program) const override {
    for (const TraceOp& op : program.ops)
      if (!op.meta.device.is_cpu()) return false;
    return true;
  }
  std::unique_ptr<KernelBuild> start(const TraceProgram&, const DebugDump& dump) override {
    return std::make_unique<LlvmKernelBuild>(dump);
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
