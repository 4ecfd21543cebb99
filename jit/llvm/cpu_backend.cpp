// The CPU trace backend: TraceProgram -> FusionPlan -> one LLVM kernel per fusion group
// (library calls for the rest) -> FusedCpuTrace, the Executable the recorder replays.
// A group that cannot be lowered or compiled is split back into eager steps and noted;
// a program with no CPU ops is declined (another backend, or the interpreter, takes it).
#include <chrono>
#include <set>

#include "jit/debug_dump.h"
#include "jit/fusion.h"
#include "jit/llvm/llvm_jit.h"
#include "jit/lower.h"
#include "jit/memory_plan.h"
#include "ops/dispatch.h"
#include "runtime/parallel.h"
#include "tracer/config.h"

namespace kiln::jit::llvm_backend {
namespace {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct CompiledKernel {
  LoweredKernel lowered;
  KernelFn fn = nullptr;
  std::vector<int64_t> strides;  // flattened per operand
  int64_t grain = 1;
};

class FusedCpuTrace final : public tracer::Executable {
 public:
  FusedCpuTrace(TraceProgram program, FusionPlan plan, MemoryPlan memory,
                std::vector<std::unique_ptr<CompiledKernel>> kernels)
      : program_(std::move(program)),
        plan_(std::move(plan)),
        memory_(std::move(memory)),
        kernels_(std::move(kernels)) {
    const int n = static_cast<int>(program_.ops.size());
    user_safe_.assign(n, 0);
    for (int i = 0; i < n; ++i) {
      if (plan_.canonical[i] != i || !plan_.materialized[i]) continue;
      const TraceOp& op = program_.ops[i];
      const InputRef* base = op.in_place                               ? &op.target
                             : op_info(op.op).family == OpFamily::View ? &op.inputs[0]
                                                                       : nullptr;
      if (!base)
        user_safe_[i] = plan_.escapes[i];
      else
        user_safe_[i] =
            base->kind == InputRef::Kind::External || user_safe_[plan_.canonical[base->index]];
    }
    scalar_base_ = scalar_bases(program_);
  }

  void run(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
           std::vector<Tensor>& values, const std::vector<bool>& wanted) const override {
    const size_t n = program_.ops.size();
    for (size_t i = 0; i < n && i < wanted.size(); ++i) {
      if (wanted[i] && !user_safe_[i]) {  // held now, but planned as an intermediate
        if (!warned_) {
          warned_ = true;
          tracer::log_line(tracer::kLogPerf,
                           "a value of a compiled trace (op " + std::to_string(i) + ", " +
                               op_name(program_.ops[i].op) +
                               ") is held now but was not when the trace compiled: this replay "
                               "runs interpreted");
        }
        tracer::interpret(program_, n, externals, scalars, values);
        return;
      }
    }
    std::vector<Tensor> v(n);
    auto resolve = [&](const InputRef& r) -> const Tensor& {
      return r.kind == InputRef::Kind::External ? externals[r.index] : v[plan_.canonical[r.index]];
    };
    if (memory_.arena_bytes > 0 && !arena_)
      arena_ = Storage::allocate(static_cast<size_t>(memory_.arena_bytes), kCPU);
    auto fresh_or_arena = [&](int i) {
      const OutputMeta& m = program_.ops[i].meta;
      if (memory_.offset[i] >= 0)
        return Tensor::make_view(arena_, m.sizes, contiguous_strides(m.sizes),
                                 memory_.offset[i] / itemsize(m.dtype), m.dtype);
      return Tensor::make(m.sizes, m.dtype, m.device);
    };
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      const Step& step = plan_.steps[s];
      if (step.kind != Step::Kind::Kernel) {
        const int i = step.op;
        const TraceOp& op = program_.ops[i];
        OpCall call{op.op, {}, {}, op.attrs};
        for (const InputRef& r : op.inputs) call.inputs.push_back(resolve(r));
        for (size_t k = 0; k < op.scalar_kinds.size(); ++k)
          call.scalars.push_back(scalars[scalar_base_[i] + k]);
        if (step.kind == Step::Kind::View) {
          v[i] = execute(call, infer_output(call));
        } else if (op.in_place) {
          v[i] = resolve(op.target);
          execute_into(call, op.meta, v[i]);
        } else {
          v[i] = fresh_or_arena(i);
          execute_into(call, op.meta, v[i]);
        }
        continue;
      }
      const CompiledKernel& k = *kernels_[s];
      for (int i : step.group.ops) {
        if (!plan_.materialized[i]) continue;
        v[i] = program_.ops[i].in_place ? resolve(program_.ops[i].target) : fresh_or_arena(i);
      }
      if (k.lowered.work == 0) continue;
      void* ptrs[64];
      std::vector<void*> many;
      void** p = ptrs;
      if (k.lowered.operands.size() > 64) {
        many.resize(k.lowered.operands.size());
        p = many.data();
      }
      for (size_t o = 0; o < k.lowered.operands.size(); ++o)
        p[o] = resolve(k.lowered.operands[o].source).data_ptr();
      int64_t payload[32];
      std::vector<int64_t> more;
      int64_t* sc = payload;
      if (k.lowered.scalar_slots.size() > 32) {
        more.resize(k.lowered.scalar_slots.size());
        sc = more.data();
      }
      for (size_t q = 0; q < k.lowered.scalar_slots.size(); ++q) {
        const Scalar& x = scalars[k.lowered.scalar_slots[q]];
        if (k.lowered.kernel.scalar_is_float[q]) {
          const double d = x.to_double();
          std::memcpy(&sc[q], &d, 8);
        } else {
          sc[q] = x.to_int();
        }
      }
      const int64_t* shape = k.lowered.shape.data();
      const int64_t* strides = k.strides.data();
      KernelFn fn = k.fn;
      parallel_for(0, k.lowered.work, k.grain,
                   [&](int64_t b, int64_t e) { fn(p, shape, strides, sc, b, e); });
    }
    values.assign(n, Tensor());
    for (size_t i = 0; i < n; ++i) {
      const bool want =
          (i < wanted.size() && wanted[i]) || (i < program_.live.size() && program_.live[i]);
      if (want && plan_.canonical[i] == static_cast<int>(i)) values[i] = v[i];
    }
  }

  int kernel_count() const override { return plan_.kernel_count(); }
  const char* backend_name() const override { return "llvm"; }
  std::vector<std::string> notes() const override { return plan_.notes; }

 private:
  TraceProgram program_;
  FusionPlan plan_;
  MemoryPlan memory_;
  std::vector<std::unique_ptr<CompiledKernel>> kernels_;  // per step (null: not a kernel)
  std::vector<uint8_t> user_safe_;
  std::vector<int> scalar_base_;
  mutable std::shared_ptr<Storage> arena_;
  mutable bool warned_ = false;
};

std::string program_text(const TraceProgram& p) {
  std::string out;
  int slot = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const TraceOp& op = p.ops[i];
    for (const tracer::TensorGuard& g : op.new_guards)
      out += "in" + std::to_string(slot++) + ": " + g.str() + "\n";
    out += "v" + std::to_string(i) + " = " + op.str() + " -> " + dtype_name(op.meta.dtype) +
           dims_str(op.meta.sizes) + (i < p.live.size() && p.live[i] ? "  [live]" : "") + "\n";
  }
  return out;
}

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
      FusionOptions options;
      options.can_fuse = [&](const TraceProgram& p, int i) {
        return !banned.count(i) && can_lower(p, i);
      };
      FusionPlan plan = plan_fusion(program, options);
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
          fallbacks.push_back("step " + std::to_string(s) +
                              " fell back to eager kernels: " + e.what());
          tracer::log_line(tracer::kLogTrace,
                           std::string("fused kernel fell back to eager kernels: ") + e.what());
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
        dump.write("trace.txt", program_text(program));
        dump.write("fusion.txt", "== before fusion\n" + program_text(program) +
                                     "\n== after fusion\n" + plan.str(program) + "\n" +
                                     memory.str() + "\n\n== kernels\n" + kernel_text);
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
