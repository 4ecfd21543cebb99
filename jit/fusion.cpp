#include "jit/fusion.h"

#include "runtime/error.h"

namespace kiln::jit {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

const tracer::TensorGuard& external_guard(const TraceProgram& p, int slot) {
  int seen = 0;
  for (const TraceOp& op : p.ops)
    for (const tracer::TensorGuard& g : op.new_guards)
      if (seen++ == slot) return g;
  throw Error(detail::cat("[jit] external input ", slot, " has no guard"));
}

const Dims& input_sizes(const TraceProgram& p, const InputRef& ref) {
  return ref.kind == InputRef::Kind::External ? external_guard(p, ref.index).sizes
                                              : p.ops[ref.index].meta.sizes;
}

InputRef in_place_root(const TraceProgram& p, InputRef target) {
  while (target.kind == InputRef::Kind::Value && p.ops[target.index].in_place)
    target = p.ops[target.index].target;
  return target;
}

DType input_dtype(const TraceProgram& p, const InputRef& ref) {
  if (ref.kind == InputRef::Kind::External) return external_guard(p, ref.index).dtype;
  // The value of an in-place op is its target: x.add_(y) into a bfloat16 x computes in
  // the promoted dtype (its meta) but leaves x bfloat16.
  const TraceOp& op = p.ops[ref.index];
  return op.in_place ? input_dtype(p, op.target) : op.meta.dtype;
}

std::vector<int> scalar_bases(const TraceProgram& p) {
  std::vector<int> base(p.ops.size());
  int next = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    base[i] = next;
    next += static_cast<int>(p.ops[i].scalar_kinds.size());
  }
  return base;
}

int FusionPlan::kernel_count() const {
  int n = 0;
  for (const Step& s : steps) n += s.kind != Step::Kind::View;
  return n;
}

std::string FusionPlan::str(const TraceProgram& p) const {
  std::string out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    out += "step " + std::to_string(i) + ": ";
    if (s.kind == Step::Kind::Kernel) {
      out += std::string(s.group.reduced_dims ? "row kernel" : "pointwise kernel") + " over " +
             dims_str(s.group.shape);
      if (s.group.reduced_dims) out += " (reducing " + std::to_string(s.group.reduced_dims) + ")";
      if (i < launch_at.size() && launch_at[i] != static_cast<int>(i))
        out += " [launched after step " + std::to_string(launch_at[i]) + "]";
      out += ":";
      for (int op : s.group.ops) {
        out += " v" + std::to_string(op) + "=" + p.ops[op].str();
        if (stored[op]) out += escapes[op] ? "[out]" : "[arena]";
      }
    } else {
      out += std::string(s.kind == Step::Kind::View ? "view "
                         : attention.count(s.op)    ? "attention "
                                                    : "library ") +
             "v" + std::to_string(s.op) + "=" + p.ops[s.op].str();
      if (s.kind == Step::Kind::Library && !p.ops[s.op].in_place)
        out += escapes[s.op] ? " [out]" : " [arena]";
    }
    out += "\n";
  }
  if (dead || merged)
    out += "removed: " + std::to_string(dead) + " dead, " + std::to_string(merged) +
           " common subexpressions\n";
  for (const std::string& n : notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace kiln::jit
