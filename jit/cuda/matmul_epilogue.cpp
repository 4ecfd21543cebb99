// Matmul epilogue folding (see matmul_epilogue.h).
#include "jit/cuda/matmul_epilogue.h"

#include <algorithm>

#include "jit/plan_passes.h"

namespace kiln::jit::cuda_backend {
namespace {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

bool gemm_dtype(DType d) {
  return d == DType::Float32 || d == DType::Float16 || d == DType::BFloat16;
}

// Row-major contiguous whatever the run: a guarded contiguous external, or a fresh
// (non-view, not in-place) value.
bool contiguous_input(const TraceProgram& p, const FusionPlan& plan, const InputRef& r) {
  if (r.kind == InputRef::Kind::External) {
    const tracer::TensorGuard& g = external_guard(p, r.index);
    return g.strides == contiguous_strides(g.sizes);
  }
  const TraceOp& op = p.ops[plan.canonical[r.index]];
  return !op.in_place && op_info(op.op).family != OpFamily::View;
}

}  // namespace

std::map<int, FoldedMatmul> fold_matmul_epilogues(const TraceProgram& p, FusionPlan& plan) {
  const int n = static_cast<int>(p.ops.size());
  const std::vector<std::vector<int>> readers = value_readers(p, plan);
  auto held = [&](int i) {
    return plan.escapes[i] || (i < static_cast<int>(p.live.size()) && p.live[i]);
  };
  std::vector<FoldedMatmul> folded;
  std::vector<int> folded_step;
  for (size_t s = 0; s + 1 < plan.steps.size(); ++s) {
    Step& step = plan.steps[s];
    Step& next = plan.steps[s + 1];
    if (step.kind != Step::Kind::Library || next.kind != Step::Kind::Kernel) continue;
    const int m = step.op;
    const TraceOp& mm = p.ops[m];
    if (mm.op != OpId::Matmul || mm.in_place || held(m) || readers[m].size() != 1 ||
        plan.attention.count(m))  // an attention step (jit/attention_rewrite.h)
      continue;
    const Dims& as = input_sizes(p, mm.inputs[0]);
    const Dims& bs = input_sizes(p, mm.inputs[1]);
    const DType dt = mm.meta.dtype;
    if (as.size() != 2 || bs.size() != 2 || !gemm_dtype(dt) || input_dtype(p, mm.inputs[0]) != dt ||
        input_dtype(p, mm.inputs[1]) != dt || !contiguous_input(p, plan, mm.inputs[0]) ||
        !contiguous_input(p, plan, mm.inputs[1]))
      continue;
    const int j = readers[m][0];
    const TraceOp& add = p.ops[j];
    if (add.op != OpId::Add || add.in_place || !add.scalar_kinds.empty() ||
        add.inputs.size() != 2 || plan.step_of[j] != static_cast<int>(s) + 1 ||
        add.meta.dtype != dt)
      continue;
    const bool mat_first =
        add.inputs[0].kind == InputRef::Kind::Value && plan.canonical[add.inputs[0].index] == m;
    const InputRef bias = mat_first ? add.inputs[1] : add.inputs[0];
    const Dims& bsz = input_sizes(p, bias);
    const int64_t cols = bs[1];
    if (!(bsz == Dims{cols} || bsz == Dims{1, cols}) || input_dtype(p, bias) != dt ||
        !contiguous_input(p, plan, bias))
      continue;
    if (bias.kind == InputRef::Kind::Value &&
        plan.step_of[plan.canonical[bias.index]] > static_cast<int>(s))
      continue;  // computed after the matmul's step
    FoldedMatmul f;
    f.matmul = m;
    f.add = j;
    f.bias = bias;
    f.m = as[0];
    f.k = as[1];
    f.n = cols;
    int out = j;
    if (readers[j].size() == 1 && !held(j)) {
      const int a = readers[j][0];
      const TraceOp& act = p.ops[a];
      const bool relu = act.op == OpId::Relu;
      const bool gelu = act.op == OpId::Gelu && act.attrs.approximate_tanh;
      if ((relu || gelu) && !act.in_place && plan.step_of[a] == static_cast<int>(s) + 1 &&
          act.meta.dtype == dt) {
        f.activation = a;
        f.epilogue = relu ? Epilogue::ReluBias : Epilogue::GeluBias;
        out = a;
      }
    }
    // Rewrite: the step writes `out`; the group loses the add (and activation).
    auto& ops = next.group.ops;
    ops.erase(std::remove_if(ops.begin(), ops.end(),
                             [&](int i) { return i == f.add || i == f.activation; }),
              ops.end());
    step.op = out;
    plan.stored[m] = 0;
    plan.stored[j] = out == j;
    plan.stored[out] = 1;
    plan.notes.push_back(std::string("matmul v") + std::to_string(m) + " + bias" +
                         (f.activation >= 0 ? std::string(" + ") + op_name(p.ops[out].op) : "") +
                         ": one cuBLASLt GEMM with the " + epilogue_name(f.epilogue) + " epilogue");
    folded.push_back(f);
    folded_step.push_back(static_cast<int>(s));
  }
  // Drop emptied groups, then renumber.
  std::vector<int> new_index(plan.steps.size(), -1);
  std::vector<Step> kept;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step& st = plan.steps[s];
    if (st.kind == Step::Kind::Kernel && st.group.ops.empty()) continue;
    new_index[s] = static_cast<int>(kept.size());
    kept.push_back(st);
  }
  plan.steps = std::move(kept);
  for (int i = 0; i < n; ++i)
    if (plan.step_of[i] >= 0) plan.step_of[i] = -1;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step& st = plan.steps[s];
    if (st.kind == Step::Kind::Kernel)
      for (int i : st.group.ops) plan.step_of[i] = static_cast<int>(s);
    else
      plan.step_of[st.op] = static_cast<int>(s);
  }
  for (int i = 0; i < n; ++i)
    if (plan.canonical[i] >= 0 && plan.canonical[i] != i)
      plan.step_of[i] = plan.step_of[plan.canonical[i]];
  std::map<int, FoldedMatmul> out;
  for (size_t q = 0; q < folded.size(); ++q) {
    const int s = new_index[folded_step[q]];
    const FoldedMatmul& f = folded[q];
    for (int i : {f.matmul, f.add, f.activation})
      if (i >= 0) plan.step_of[i] = s;
    out[s] = f;
  }
  return out;
}

}  // namespace kiln::jit::cuda_backend
