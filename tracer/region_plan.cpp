#include "tracer/region_plan.h"

#include "runtime/error.h"
#include "tracer/config.h"
#include "tracer/verify.h"

namespace kiln::tracer {

bool launchable(const TraceProgram& program) {
  for (const TraceOp& op : program.ops)
    if (op_info(op.op).family == OpFamily::Random) return false;
  return true;
}

std::string launch(const RegionPlan& plan, const std::vector<Tensor>& externals,
                   const std::vector<int>& wanted, std::vector<Tensor>* values) {
  KILN_CHECK(plan.trace != nullptr, Error, "[compile] no compiled trace to launch");
  const CompiledTrace& compiled = *plan.trace;
  if (externals.size() != compiled.guards.size())
    return detail::cat(externals.size(), " inputs, the trace takes ", compiled.guards.size());
  for (size_t i = 0; i < externals.size(); ++i) {
    const Tensor& t = externals[i];
    if (!t.defined() || t.impl()->storage == nullptr || t.impl()->pending)
      return detail::cat("input ", i, ": no value yet");
    int32_t alias = -1;
    for (size_t j = 0; j < i && alias < 0; ++j)
      if (externals[j].impl()->storage == t.impl()->storage) alias = static_cast<int32_t>(j);
    TensorGuard exact = compiled.guards[i];  // the sizes and strides the plan was made for
    exact.symbols.clear();
    exact.derived_strides = 0;
    const std::string diff = exact.diff(TensorGuard::of(t, alias));
    if (!diff.empty()) return detail::cat("input ", i, ": ", diff);
  }
  std::vector<bool> want(compiled.program.ops.size(), false);
  for (int i : wanted) {
    KILN_CHECK(i >= 0 && i < static_cast<int>(want.size()), IndexError, "[compile] op ", i,
               " is not in the trace");
    want[i] = true;
  }
  VerifyReference reference;
  if (config().verify) reference = verify_reference(compiled, externals, plan.scalars);
  std::vector<Tensor> all;
  compiled.executable->run(externals, plan.scalars, all, want);
  if (config().verify) {
    std::vector<std::weak_ptr<TensorImpl>> held(all.size());
    for (int i : wanted)
      if (i < static_cast<int>(all.size())) held[i] = all[i].impl_ptr();
    verify_replay(compiled, all, reference, plan.scalars, held);
  }
  values->clear();
  for (int i : wanted) values->push_back(all.at(i));
  return "";
}

}  // namespace kiln::tracer
