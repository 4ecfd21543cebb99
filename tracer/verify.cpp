#include "tracer/verify.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "ops/dispatch.h"
#include "runtime/error.h"

namespace kiln::tracer {
namespace {

constexpr double kTolerance = 1e-4;         // relative to the value's largest magnitude
constexpr double kRoundingMultiplier = 10;  // compiled vs float64 against eager vs float64
constexpr double kNoiseDominated = 1e-2;    // eager vs float64 past this: the value is noise

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

DType widened(DType d) { return is_floating(d) ? DType::Float64 : d; }

// The program with every floating value and factory in float64.
TraceProgram widened(const TraceProgram& program) {
  TraceProgram wide = program;
  for (TraceOp& op : wide.ops) {
    op.attrs.dtype = widened(op.attrs.dtype);
    op.meta.dtype = widened(op.meta.dtype);
  }
  return wide;
}

// The program run in float64 on the inputs before the replay; nullopt when an op has no
// float64 kernel (the mismatch then stands). A collective is not called again (only this
// rank makes this run): its result is the eager reference's, widened.
std::optional<std::vector<Tensor>> float64_values(const CompiledTrace& compiled,
                                                  const VerifyReference& reference,
                                                  const std::vector<Scalar>& scalars) {
  NoHookScope untraced;
  const TraceProgram wide = widened(compiled.program);
  const std::vector<Tensor>& inputs = reference.wide_inputs;
  std::vector<Tensor> values;
  try {
    size_t start = 0;
    for (size_t i = 0; i < wide.ops.size(); ++i) {
      const TraceOp& op = wide.ops[i];
      if (!has_effects(op.op)) continue;
      interpret_from(wide, start, i, inputs, scalars, values);
      start = i + 1;
      const Tensor result = reference.effects[i].to(op.meta.dtype);
      if (!op.in_place) {
        values[i] = result;
        continue;
      }
      const InputRef& t = op.target;
      values[i] = t.kind == InputRef::Kind::External ? inputs[t.index] : values[t.index];
      values[i].copy_(result);
    }
    interpret_from(wide, start, wide.ops.size(), inputs, scalars, values);
  } catch (const Error&) {
    return std::nullopt;
  }
  return values;
}

}  // namespace

VerifyReference verify_reference(const CompiledTrace& compiled,
                                 const std::vector<Tensor>& externals,
                                 const std::vector<Scalar>& scalars) {
  NoHookScope untraced;
  std::vector<bool> written(externals.size(), false);
  for (const TraceOp& op : compiled.program.ops)
    if (op.in_place && op.target.kind == InputRef::Kind::External) written[op.target.index] = true;
  VerifyReference reference;
  std::vector<Tensor> inputs = externals;
  for (size_t i = 0; i < externals.size(); ++i) {
    if (written[i]) inputs[i] = externals[i].clone();
    const Tensor& x = externals[i];
    reference.wide_inputs.push_back(is_floating(x.dtype()) ? x.to(DType::Float64).clone()
                                    : written[i]           ? x.clone()
                                                           : x);
  }
  // Run in pieces, to keep each collective's result as it was right after it ran.
  const TraceProgram& program = compiled.program;
  reference.effects.resize(program.ops.size());
  size_t start = 0;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    if (!has_effects(program.ops[i].op)) continue;
    interpret_from(program, start, i + 1, inputs, scalars, reference.values);
    reference.effects[i] = reference.values[i].clone();
    start = i + 1;
  }
  interpret_from(program, start, program.ops.size(), inputs, scalars, reference.values);
  return reference;
}

void verify_replay(const CompiledTrace& compiled, const std::vector<Tensor>& values,
                   const VerifyReference& reference, const std::vector<Scalar>& scalars,
                   const std::vector<std::weak_ptr<TensorImpl>>& outputs) {
  std::optional<std::vector<Tensor>> exact;
  bool exact_tried = false;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!compiled.program.live[i] && !(i < outputs.size() && !outputs[i].expired())) continue;
    const double err = relative_error(values[i], reference.values[i]);
    if (err <= kTolerance) continue;
    if (!exact_tried) {
      exact = float64_values(compiled, reference, scalars);
      exact_tried = true;
    }
    const std::string op = detail::cat("[verify] trace ", compiled.id, " op ", i, " (",
                                       op_name(compiled.program.ops[i].op), "): ");
    KILN_CHECK(exact.has_value(), Error, op, "compiled and eager results differ, relative error ",
               err, " (no float64 run to judge it: an op has no float64 kernel)");
    const double compiled_err = relative_error(values[i], (*exact)[i]);
    const double eager_err = relative_error(reference.values[i], (*exact)[i]);
    // A value eager float32 itself misses by over 1% is rounding noise amplified (Adam's
    // update of an exactly-zero gradient, m / sqrt(v) of ~1e-9 terms): float64 is no
    // reference for it, and a compiled value of the same scale (relative error under 1)
    // is as right as eager's.
    const double noise_bound = eager_err > kNoiseDominated ? 1.0 : 0.0;
    KILN_CHECK(compiled_err <= std::max({kRoundingMultiplier * eager_err, kTolerance, noise_bound}),
               Error, op, "compiled and eager results differ, relative error ", err,
               "; against float64: compiled ", compiled_err, ", eager ", eager_err);
  }
}

}  // namespace kiln::tracer
