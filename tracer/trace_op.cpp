#include "tracer/trace_op.h"

#include "runtime/error.h"

namespace kiln::tracer {
namespace {

std::string ref_str(const InputRef& r) {
  return (r.kind == InputRef::Kind::External ? "in" : "v") + std::to_string(r.index);
}

bool same_op(const TraceOp& a, const TraceOp& b) {
  return a.op == b.op && a.in_place == b.in_place && (!a.in_place || a.target == b.target) &&
         a.inputs.size() == b.inputs.size() && a.scalar_kinds == b.scalar_kinds &&
         a.attrs == b.attrs;
}

}  // namespace

TensorGuard TensorGuard::of(const Tensor& t, int32_t alias_of) {
  TensorGuard g;
  g.dtype = t.dtype();
  g.device = t.device();
  g.sizes = t.sizes();
  g.strides = t.strides();
  g.alias_of = alias_of;
  return g;
}

std::string TensorGuard::diff(const TensorGuard& a) const {
  if (dtype != a.dtype)
    return detail::cat("dtype expected ", dtype_name(dtype), ", got ", dtype_name(a.dtype));
  if (device != a.device)
    return detail::cat("device expected ", device.str(), ", got ", a.device.str());
  if (sizes.size() != a.sizes.size())
    return detail::cat("rank expected ", sizes.size(), ", got ", a.sizes.size(), " (shape ",
                       dims_str(a.sizes), ")");
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] != a.sizes[i])
      return detail::cat("shape[", i, "] expected ", sizes[i], ", got ", a.sizes[i], " (shape ",
                         dims_str(sizes), " -> ", dims_str(a.sizes), ")");
  }
  if (strides != a.strides)
    return detail::cat("strides expected ", dims_str(strides), ", got ", dims_str(a.strides));
  if (alias_of != a.alias_of)
    return alias_of < 0
               ? detail::cat(
                     "aliasing: expected no shared storage, got storage shared "
                     "with input ",
                     a.alias_of)
               : detail::cat(
                     "aliasing: expected storage shared with input ", alias_of, ", got ",
                     a.alias_of < 0 ? std::string("none") : "input " + std::to_string(a.alias_of));
  return "";
}

std::string TensorGuard::str() const {
  std::string s = detail::cat(dtype_name(dtype), dims_str(sizes), " ", device.str());
  if (strides != contiguous_strides(sizes)) s += " strides " + dims_str(strides);
  if (alias_of >= 0) s += " aliases in" + std::to_string(alias_of);
  return s;
}

bool TraceOp::same_wiring(const TraceOp& o) const {
  if (!same_op(*this, o) || new_guards.size() != o.new_guards.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!(inputs[i] == o.inputs[i])) return false;
  return true;
}

bool TraceOp::matches(const TraceOp& o) const {
  if (!same_wiring(o)) return false;
  for (size_t i = 0; i < new_guards.size(); ++i)
    if (!(new_guards[i] == o.new_guards[i])) return false;
  return true;
}

std::string TraceOp::guard_diff(const TraceOp& actual) const {
  if (!same_wiring(actual)) return "";
  // The new externals appear in input order; name each by its slot.
  size_t g = 0;
  for (size_t i = 0; i < inputs.size() && g < new_guards.size(); ++i) {
    const InputRef& r = inputs[i];
    if (r.kind != InputRef::Kind::External) continue;
    bool first_here = true;
    for (size_t j = 0; j < i; ++j)
      if (inputs[j] == r) first_here = false;
    if (!first_here) continue;
    const std::string d = new_guards[g].diff(actual.new_guards[g]);
    if (!d.empty())
      return detail::cat("input in", r.index, " (argument ", i, " of ", op_name(op), "): ", d);
    ++g;
  }
  return "";
}

std::string TraceOp::str() const {
  std::string s = std::string(op_name(op)) + "(";
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? ", " : "") + ref_str(inputs[i]);
  for (size_t i = 0; i < scalar_kinds.size(); ++i)
    s += (inputs.empty() && i == 0 ? "" : ", ") + std::string("arg");
  s += ")";
  if (in_place) s += " -> " + ref_str(target) + " in place";
  return s;
}

}  // namespace kiln::tracer
