// The interpreting backend: a compiled trace that executes its ops one by one with the
// eager kernels. It proves recording, guards, replay and side exits correct before
// code generation exists, and is the fallback when a fused backend declines a trace.
#include "ops/dispatch.h"
#include "runtime/error.h"
#include "tracer/backend.h"
#include "tracer/config.h"

namespace kiln::tracer {
namespace {

const Tensor& resolve(const InputRef& ref, const std::vector<Tensor>& externals,
                      const std::vector<Tensor>& values) {
  return ref.kind == InputRef::Kind::External ? externals[ref.index] : values[ref.index];
}

class InterpretedTrace final : public Executable {
 public:
  explicit InterpretedTrace(TraceProgram program) : program_(std::move(program)) {}
  void run(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
           std::vector<Tensor>& values, const std::vector<bool>&) const override {
    interpret(program_, program_.ops.size(), externals, scalars, values);
  }
  int kernel_count() const override {
    int n = 0;
    for (const TraceOp& op : program_.ops) n += op_info(op.op).family != OpFamily::View;
    return n;
  }
  const char* backend_name() const override { return "interpreter"; }

 private:
  TraceProgram program_;
};

class InterpretingBackend final : public TraceBackend {
 public:
  std::unique_ptr<Executable> compile(const TraceProgram& program) override {
    return std::make_unique<InterpretedTrace>(program);
  }
};

}  // namespace

void interpret(const TraceProgram& program, size_t count, const std::vector<Tensor>& externals,
               const std::vector<Scalar>& scalars, std::vector<Tensor>& values) {
  interpret_from(program, 0, count, externals, scalars, values);
}

void interpret_from(const TraceProgram& program, size_t start, size_t count,
                    const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
                    std::vector<Tensor>& values) {
  values.resize(program.ops.size());
  size_t next_scalar = 0;
  for (size_t i = 0; i < start; ++i) next_scalar += program.ops[i].scalar_kinds.size();
  for (size_t i = start; i < count; ++i) {
    const TraceOp& op = program.ops[i];
    OpCall call{op.op, {}, {}, op.attrs};
    for (const InputRef& ref : op.inputs) call.inputs.push_back(resolve(ref, externals, values));
    for (size_t s = 0; s < op.scalar_kinds.size(); ++s)
      call.scalars.push_back(scalars[next_scalar++]);
    if (op.in_place) {
      const Tensor& target = resolve(op.target, externals, values);
      execute_into(call, op.meta, target);
      values[i] = target;
    } else {
      // A view's offset depends on its input's offset, which guards do not fix: redo it.
      values[i] = op_info(op.op).family == OpFamily::View ? execute(call, infer_output(call))
                                                          : execute(call, op.meta);
    }
  }
}

TraceBackend& interpreting_backend() {
  static InterpretingBackend backend;
  return backend;
}

namespace {
std::vector<TraceBackend*>& backends() {
  static std::vector<TraceBackend*> list;
  return list;
}
}  // namespace

void register_backend(TraceBackend* backend) { backends().push_back(backend); }

void register_backend_first(TraceBackend* backend) {
  backends().insert(backends().begin(), backend);
}

void unregister_backend(TraceBackend* backend) { std::erase(backends(), backend); }

std::unique_ptr<Executable> compile_trace(const TraceProgram& program) {
  if (config().jit) {
    for (TraceBackend* b : backends())
      if (std::unique_ptr<Executable> e = b->compile(program)) return e;
  }
  return interpreting_backend().compile(program);
}

}  // namespace kiln::tracer
