// The backend-independent part of replaying a fused trace (see fused_trace.h).
#include "jit/fused_trace.h"

#include <cstring>
#include <map>

#include "ops/dispatch.h"
#include "tracer/config.h"

namespace kiln::jit {

using tracer::InputRef;
using tracer::TraceOp;

FusedTrace::FusedTrace(tracer::TraceProgram program, FusionPlan plan, MemoryPlan memory)
    : program_(std::move(program)), plan_(std::move(plan)), memory_(std::move(memory)) {
  const int n = static_cast<int>(program_.ops.size());
  user_safe_.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (plan_.canonical[i] != i || !plan_.stored[i]) continue;
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

bool FusedTrace::must_interpret(const std::vector<bool>& wanted) const {
  for (size_t i = 0; i < program_.ops.size() && i < wanted.size(); ++i) {
    if (!wanted[i] || user_safe_[i]) continue;
    if (!warned_) {
      warned_ = true;
      tracer::log_line(tracer::kLogPerf, "a value of a compiled trace (op " + std::to_string(i) +
                                             ", " + op_name(program_.ops[i].op) +
                                             ") is held now but was not when the trace "
                                             "compiled: this replay runs interpreted");
    }
    return true;
  }
  return false;
}

namespace {

// The arena GPU plans share: one per device and thread, as large as the largest plan that
// ran. A device's work goes to its one stream, so two plans' runs never overlap there,
// and no arena value outlives its run (what the user keeps is fresh or a copy): every
// plan can use the same bytes, and a step's traces cost the largest one's intermediates,
// not their sum. Growing gives the arena a new address, which a plan's CUDA graph sees as
// moved pointers (patched, or its library calls recorded again) once.
std::shared_ptr<Storage> shared_gpu_arena(Device device, int64_t bytes) {
  thread_local std::map<int, std::shared_ptr<Storage>> arenas;
  std::shared_ptr<Storage>& arena = arenas[device.index];
  if (!arena || static_cast<int64_t>(arena->nbytes()) < bytes) {
    arena.reset();  // the old bytes go back to the cache first (the stream orders their reuse)
    arena = Storage::allocate(static_cast<size_t>(bytes), device);
  }
  return arena;
}

}  // namespace

Tensor FusedTrace::output_for(int i, const std::vector<Tensor>& externals,
                              const std::vector<Tensor>& v) const {
  const TraceOp& op = program_.ops[i];
  if (op.in_place) return resolve(op.target, externals, v);
  const OutputMeta& m = op.meta;
  if (memory_.offset[i] >= 0) {
    std::shared_ptr<Storage> arena;
    if (m.device.is_cuda()) {
      arena = shared_gpu_arena(m.device, memory_.arena_bytes);
    } else {
      if (!arena_) arena_ = Storage::allocate(static_cast<size_t>(memory_.arena_bytes), m.device);
      arena = arena_;
    }
    return Tensor::make_view(arena, m.sizes, contiguous_strides(m.sizes),
                             memory_.offset[i] / itemsize(m.dtype), m.dtype);
  }
  return Tensor::make(m.sizes, m.dtype, m.device);
}

OpCall FusedTrace::call_for(int i, const std::vector<Tensor>& externals,
                            const std::vector<Scalar>& scalars,
                            const std::vector<Tensor>& v) const {
  const TraceOp& op = program_.ops[i];
  if (auto a = plan_.attention.find(i); a != plan_.attention.end()) {
    // The op's id, not the attention family's: nothing takes the call for one with dropout.
    OpCall call{op.op, {}, {}, {}};
    const AttentionRewrite& r = a->second;
    for (const InputRef& in : r.inputs) call.inputs.push_back(resolve(in, externals, v));
    call.scalars.push_back(r.scaled >= 0 ? scalar_arg(scalars, r.scaled, 0) : Scalar(1.0));
    for (const AttentionRewrite::ScalarCheck& c : r.checks)
      call.scalars.push_back(scalar_arg(scalars, c.op, c.index));
    return call;
  }
  OpCall call{op.op, {}, {}, op.attrs};
  for (const InputRef& r : op.inputs) call.inputs.push_back(resolve(r, externals, v));
  for (size_t k = 0; k < op.scalar_kinds.size(); ++k)
    call.scalars.push_back(scalar_arg(scalars, i, static_cast<int>(k)));
  return call;
}

void FusedTrace::run_eager_step(const Step& step, const std::vector<Tensor>& externals,
                                const std::vector<Scalar>& scalars, std::vector<Tensor>& v,
                                const Tensor& out) const {
  const int i = step.op;
  const OpCall call = call_for(i, externals, scalars, v);
  if (step.kind == Step::Kind::View) {
    v[i] = execute(call, infer_output(call));
    return;
  }
  v[i] = out;
  run_library_call(i, call, v[i]);
}

void FusedTrace::run_library_call(int i, const OpCall& call, const Tensor& out) const {
  if (auto a = plan_.attention.find(i); a != plan_.attention.end())
    run_attention_step(a->second, call, out);
  else
    execute_into(call, program_.ops[i].meta, out);
}

void FusedTrace::hand_out(std::vector<Tensor>& values, const std::vector<Tensor>& v,
                          const std::vector<bool>& wanted) const {
  const size_t n = program_.ops.size();
  values.assign(n, Tensor());
  for (size_t i = 0; i < n; ++i) {
    const bool want =
        (i < wanted.size() && wanted[i]) || (i < program_.live.size() && program_.live[i]);
    if (want && plan_.canonical[i] == static_cast<int>(i)) values[i] = v[i];
  }
}

void FusedTrace::scalar_payloads(const std::vector<int>& slots,
                                 const std::vector<uint8_t>& is_float,
                                 const std::vector<Scalar>& scalars, int64_t* out) const {
  for (size_t q = 0; q < slots.size(); ++q) {
    const Scalar& x = scalars[static_cast<size_t>(slots[q])];
    if (is_float[q]) {
      const double d = x.to_double();
      std::memcpy(&out[q], &d, 8);
    } else {
      out[q] = x.to_int();
    }
  }
}

}  // namespace kiln::jit
