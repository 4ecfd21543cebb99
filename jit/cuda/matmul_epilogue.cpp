// Matmul epilogue folding (see matmul_epilogue.h).
#include "jit/cuda/matmul_epilogue.h"

#include <algorithm>
#include <string>
#include <vector>

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
    // The chain after it in the next group: adds of a bias ([N] or [1, N]) and of a
    // residual ([M, N], cuBLASLt's C with beta 1), at most one of each, each the single
    // reader of the value before it; then an activation. The epilogue applies
    // act(a @ b + C + bias), which is the chain's value whatever the adds' order.
    FoldedMatmul f;
    f.matmul = m;
    f.m = as[0];
    f.k = as[1];
    f.n = bs[1];
    const Dims out_sizes{f.m, f.n};
    auto before_step = [&](const InputRef& r) {  // an external, or computed before step s
      return r.kind != InputRef::Kind::Value ||
             plan.step_of[plan.canonical[r.index]] <= static_cast<int>(s);
    };
    int out = m;
    while (readers[out].size() == 1 && !held(out) && f.activation < 0) {
      const int j = readers[out][0];
      const TraceOp& add = p.ops[j];
      if (add.op != OpId::Add || add.in_place || !add.scalar_kinds.empty() ||
          add.inputs.size() != 2 || plan.step_of[j] != static_cast<int>(s) + 1 ||
          add.meta.dtype != dt)
        break;
      const bool out_first =
          add.inputs[0].kind == InputRef::Kind::Value && plan.canonical[add.inputs[0].index] == out;
      const InputRef other = out_first ? add.inputs[1] : add.inputs[0];
      if (other.kind == InputRef::Kind::Value && plan.canonical[other.index] == out) break;
      const Dims& osz = input_sizes(p, other);
      if (input_dtype(p, other) != dt || !contiguous_input(p, plan, other) || !before_step(other))
        break;
      if (f.bias_add < 0 && (osz == Dims{f.n} || osz == Dims{1, f.n})) {
        f.bias_add = j;
        f.bias = other;
      } else if (f.residual_add < 0 && osz == out_sizes) {
        f.residual_add = j;
        f.residual = other;
      } else {
        break;
      }
      out = j;
    }
    if (out == m) continue;  // no add folded: the matmul stays a plain library call
    if (readers[out].size() == 1 && !held(out)) {
      const int a = readers[out][0];
      const TraceOp& act = p.ops[a];
      const bool relu = act.op == OpId::Relu;
      const bool gelu = act.op == OpId::Gelu && act.attrs.approximate_tanh;
      if ((relu || gelu) && !act.in_place && plan.step_of[a] == static_cast<int>(s) + 1 &&
          act.meta.dtype == dt) {
        f.activation = a;
        out = a;
      }
    }
    const bool bias = f.bias_add >= 0,
               relu = f.activation >= 0 && p.ops[f.activation].op == OpId::Relu;
    f.epilogue = f.activation < 0 ? (bias ? Epilogue::Bias : Epilogue::None)
                 : relu           ? (bias ? Epilogue::ReluBias : Epilogue::Relu)
                                  : (bias ? Epilogue::GeluBias : Epilogue::Gelu);
    // Rewrite: the step writes `out`; the group loses the adds (and activation).
    auto& ops = next.group.ops;
    ops.erase(std::remove_if(ops.begin(), ops.end(),
                             [&](int i) {
                               return i == f.bias_add || i == f.residual_add || i == f.activation;
                             }),
              ops.end());
    step.op = out;
    for (int i : {m, f.bias_add, f.residual_add, f.activation})
      if (i >= 0) plan.stored[i] = 0;
    plan.stored[out] = 1;
    std::string what = std::string("matmul v") + std::to_string(m);
    std::vector<int> chain;  // in the trace's order, which is the chain's
    for (int i : {f.bias_add, f.residual_add, f.activation})
      if (i >= 0) chain.push_back(i);
    std::sort(chain.begin(), chain.end());
    for (int i : chain)
      what += i == f.bias_add       ? " + bias"
              : i == f.residual_add ? " + residual"
                                    : " + " + std::string(op_name(p.ops[i].op));
    plan.notes.push_back(what + ": one cuBLASLt GEMM with the " + epilogue_name(f.epilogue) +
                         " epilogue" + (f.residual_add >= 0 ? " and C (beta 1)" : ""));
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
    for (int i : {f.matmul, f.bias_add, f.residual_add, f.activation})
      if (i >= 0) plan.step_of[i] = s;
    out[s] = f;
  }
  return out;
}

}  // namespace kiln::jit::cuda_backend
