#include "tracer/verify.h"

#include <algorithm>
#include <cmath>

#include "ops/dispatch.h"
#include "runtime/error.h"

namespace kiln::tracer {
namespace {

// Largest |a - b| relative to max |b|, over all elements (host read, untraced).
double relative_error(const Tensor& a, const Tensor& b) {
  NoHookScope untraced;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (std::isnan(x[i])) continue;
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / std::max(scale, 1e-30);
}

}  // namespace

std::vector<Tensor> verify_reference(const CompiledTrace& compiled,
                                     const std::vector<Tensor>& externals,
                                     const std::vector<Scalar>& scalars) {
  std::vector<Tensor> inputs = externals;
  for (const TraceOp& op : compiled.program.ops)
    if (op.in_place && op.target.kind == InputRef::Kind::External)
      inputs[op.target.index] = inputs[op.target.index].clone();
  std::vector<Tensor> reference;
  interpret(compiled.program, compiled.program.ops.size(), inputs, scalars, reference);
  return reference;
}

void verify_replay(const CompiledTrace& compiled, const std::vector<Tensor>& values,
                   const std::vector<Tensor>& reference,
                   const std::vector<std::weak_ptr<TensorImpl>>& outputs) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!compiled.program.live[i] && !(i < outputs.size() && !outputs[i].expired())) continue;
    const double err = relative_error(values[i], reference[i]);
    KILN_CHECK(err <= 1e-4, Error, "[verify] trace ", compiled.id, " op ", i, " (",
               op_name(compiled.program.ops[i].op),
               "): compiled and eager results differ, "
               "relative error ",
               err);
  }
}

}  // namespace kiln::tracer
