#include "tracer/trace_op.h"

#include "runtime/error.h"
#include "tracer/symbolic_shapes.h"

namespace kiln::tracer {
namespace {

std::string ref_str(const InputRef& r) {
  return (r.kind == InputRef::Kind::External ? "in" : "v") + std::to_string(r.index);
}

// Symbolic bounds (symbolic_shapes.h) compare as symbolic guards do: two ops whose
// bounds are the same symbols are the same op whatever values they were compiled at.
bool same_op(const TraceOp& a, const TraceOp& b) {
  if (!(a.op == b.op && a.in_place == b.in_place && (!a.in_place || a.target == b.target) &&
        a.inputs.size() == b.inputs.size() && a.scalar_kinds == b.scalar_kinds &&
        a.bounds == b.bounds))
    return false;
  if (!a.bounds.any()) return a.attrs == b.attrs;
  OpAttrs x = a.attrs, y = b.attrs;
  if (a.bounds.start >= 0) x.start = y.start = 0;
  if (a.bounds.end >= 0) x.end = y.end = 0;
  return x == y;
}

// Whether two guards pass the same inputs. Exact guards: equal. Symbolic guards keep the
// sizes and strides they were compiled with, which their symbolic dims and derived
// strides do not check: two that differ only there are the same guard (the symbolic
// variants of one trace compiled at two sizes share their trie path).
bool same_guard(const TensorGuard& a, const TensorGuard& b) {
  if (!a.symbolic() || !b.symbolic()) return a == b;
  if (a.dtype != b.dtype || a.device != b.device || a.alias_of != b.alias_of ||
      a.symbols != b.symbols || a.derived_strides != b.derived_strides ||
      a.sizes.size() != b.sizes.size() || a.strides.size() != b.strides.size())
    return false;
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    if ((d >= a.symbols.size() || a.symbols[d] < 0) && a.sizes[d] != b.sizes[d]) return false;
    if (!((a.derived_strides >> d) & 1u) && a.strides[d] != b.strides[d]) return false;
  }
  return true;
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
    if (i < symbols.size() && symbols[i] >= 0) {
      if (a.sizes[i] < 2)
        return detail::cat("shape[", i, "] expected a size >= 2 (symbolic s", symbols[i],
                           "; sizes 0 and 1 are specialised), got ", a.sizes[i], " (shape ",
                           dims_str(a.sizes), ")");
      continue;
    }
    if (sizes[i] != a.sizes[i])
      return detail::cat("shape[", i, "] expected ", sizes[i], ", got ", a.sizes[i], " (shape ",
                         dims_str(sizes), " -> ", dims_str(a.sizes), ")");
  }
  if (symbolic()) {
    const Dims contiguous = contiguous_strides(a.sizes);
    for (size_t i = 0; i < strides.size(); ++i) {
      const bool derived = (derived_strides >> i) & 1u;
      if (derived ? a.strides[i] != contiguous[i] : a.strides[i] != strides[i])
        return detail::cat("strides expected ", str(), ", got ", dims_str(a.strides));
    }
  } else if (strides != a.strides) {
    return detail::cat("strides expected ", dims_str(strides), ", got ", dims_str(a.strides));
  }
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
  std::string shape = dims_str(sizes);
  if (symbolic()) {
    shape = "[";
    for (size_t i = 0; i < sizes.size(); ++i)
      shape += (i ? ", " : "") + (i < symbols.size() && symbols[i] >= 0
                                      ? "s" + std::to_string(symbols[i])
                                      : std::to_string(sizes[i]));
    shape += "]";
  }
  std::string s = detail::cat(dtype_name(dtype), shape, " ", device.str());
  if (derived_strides != 0) {
    bool other = false;
    for (size_t i = 0; i < strides.size(); ++i)
      other =
          other || (!((derived_strides >> i) & 1u) && strides[i] != contiguous_strides(sizes)[i]);
    if (other) s += " strides " + dims_str(strides) + " (some follow the sizes)";
  } else if (strides != contiguous_strides(sizes)) {
    s += " strides " + dims_str(strides);
  }
  if (alias_of >= 0) s += " aliases in" + std::to_string(alias_of);
  return s;
}

bool TraceOp::same_wiring(const TraceOp& o) const {
  if (!same_op(*this, o) || new_guards.size() != o.new_guards.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!(inputs[i] == o.inputs[i])) return false;
  return true;
}

bool TraceOp::same_but_fresh_externals(const TraceOp& o) const {
  if (in_place || !same_op(*this, o)) return false;
  bool external = false, internal = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputRef& a = inputs[i];
    const InputRef& b = o.inputs[i];
    if (a.kind != b.kind) return false;
    if (a.kind == InputRef::Kind::External) {
      external = true;
    } else {
      if (a.index != b.index) return false;
      internal = true;
    }
  }
  return external && internal;
}

bool TraceOp::matches(const TraceOp& o) const {
  if (!same_wiring(o)) return false;
  for (size_t i = 0; i < new_guards.size(); ++i)
    if (!same_guard(new_guards[i], o.new_guards[i])) return false;
  return true;
}

std::string TraceOp::guard_diff(const TraceOp& actual, const std::vector<int64_t>* symbols) const {
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
    std::string d = new_guards[g].diff(actual.new_guards[g]);
    if (d.empty() && symbols && new_guards[g].symbolic())
      d = symbolic_diff(new_guards[g], actual.new_guards[g], *symbols);
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
