// The plan passes (see plan_passes.h).
#include "jit/plan_passes.h"

#include <algorithm>

namespace kiln::jit {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

bool is_fill_scalar(const TraceOp& op) {
  if (op.op != OpId::Full || op.in_place) return false;
  for (int64_t d : op.meta.sizes)
    if (d != 1) return false;
  return true;
}

namespace {

bool is_live(const TraceProgram& p, int i) {
  return i < static_cast<int>(p.live.size()) && p.live[i];
}

// Held by the user mid-walk (TraceProgram::held): kept in memory, not handed out, where
// the backend launches a trace in parts while the walk goes on (CUDA); on the CPU, where a
// trace runs whole at its end, fusing such a value away costs nothing.
bool is_held(const TraceProgram& p, int i) {
  return i < static_cast<int>(p.held.size()) && p.held[i] && tracer::home_device(p).is_cuda();
}

bool is_pointwise(OpFamily f, OpId op) {
  return f == OpFamily::Unary || f == OpFamily::Clamp || f == OpFamily::Binary ||
         f == OpFamily::Where || f == OpFamily::Random || op == OpId::Full;
}

bool is_row_op(OpId op) {
  switch (op) {
    case OpId::Sum:
    case OpId::Mean:
    case OpId::Max:
    case OpId::Min:
    case OpId::Var:
    case OpId::LogSumExp:
    case OpId::Softmax:
    case OpId::LogSoftmax:
    case OpId::LayerNorm:
      return true;
    default:
      return false;
  }
}

// The trailing dims a row op reduces over, or -1 if it is not a trailing reduction.
int reduced_trailing_dims(const TraceOp& op, int64_t rank) {
  if (op.op == OpId::Softmax || op.op == OpId::LogSoftmax) {
    const int64_t d = op.attrs.dim < 0 ? op.attrs.dim + rank : op.attrs.dim;
    return rank > 0 && d == rank - 1 ? 1 : -1;
  }
  if (op.op == OpId::LayerNorm) return static_cast<int>(op.attrs.dims.size());
  const Dims& dims = op.attrs.dims;
  if (dims.empty() || rank == 0) return -1;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != rank - static_cast<int64_t>(dims.size()) + static_cast<int64_t>(i)) return -1;
  return static_cast<int>(dims.size());
}

Dims row_shape(const Dims& s, int k, bool keep) {
  Dims r;
  for (size_t d = 0; d < s.size(); ++d) {
    if (d + k < s.size())
      r.push_back(s[d]);
    else if (keep)
      r.push_back(1);
  }
  return r;
}

int64_t product(const Dims& d, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= d[i];
  return n;
}

// The steps, with or without joining fusible ops into one open group (see plan_passes.h).
void make_steps(const TraceProgram& p, const FusionOptions& options, FusionPlan& plan, bool fuse) {
  const int n = static_cast<int>(p.ops.size());
  plan.steps.clear();
  plan.step_of.assign(n, -1);
  std::vector<int> group_of(n, -1);  // step index of the op's group
  int open = -1;                     // step index of the open group
  // Externals the open (pointwise) group wrote in place. Later ops may still join it if
  // they read those externals only element for element (same shape, not through a view):
  // each element is then read and written by one thread, loads before stores. An
  // optimizer's update (m.copy_, v.copy_, p.copy_ of one parameter) is one kernel.
  std::vector<int> written;
  auto close = [&] {
    open = -1;
    written.clear();
  };
  auto was_written = [&](int external) {
    return std::find(written.begin(), written.end(), external) != written.end();
  };
  auto value_input = [&](const InputRef& r) {
    return r.kind == InputRef::Kind::Value ? plan.canonical[r.index] : -1;
  };
  // Per op: the external input a view (chain) looks into, or -1.
  std::vector<int> view_of(n, -1);
  for (int i = 0; i < n; ++i) {
    const TraceOp& op = p.ops[i];
    if (op_info(op.op).family != OpFamily::View) continue;
    const InputRef& r = op.inputs[0];
    view_of[i] = r.kind == InputRef::Kind::External ? r.index : view_of[r.index];
  }
  auto reads_view_of = [&](const InputRef& r, int external) {
    return r.kind == InputRef::Kind::Value && view_of[r.index] == external;
  };
  // Per value: the value a view (chain) of it looks into, or -1 (itself when not a view).
  std::vector<int> value_view_of(n, -1);
  for (int i = 0; i < n; ++i) {
    const TraceOp& op = p.ops[i];
    if (op_info(op.op).family != OpFamily::View) continue;
    const int v = value_input(op.inputs[0]);
    if (v >= 0) value_view_of[i] = value_view_of[v] >= 0 ? value_view_of[v] : v;
  }
  auto reads_view_of_value = [&](const InputRef& r, int value) {
    const int v = value_input(r);
    return v >= 0 && value_view_of[v] == value;
  };
  for (int i = 0; i < n; ++i) {
    if (plan.canonical[i] != i) continue;
    const TraceOp& op = p.ops[i];
    const OpFamily fam = op_info(op.op).family;
    const bool fusible_kind = is_pointwise(fam, op.op) || is_row_op(op.op);
    int value_target = -1;  // a fused first write into this value (see below)
    bool fusible = fusible_kind && (!options.can_fuse || options.can_fuse(p, i));
    if (fusible_kind && !fusible)
      plan.notes.push_back("v" + std::to_string(i) + " " + op.str() +
                           ": no fused code for this op/dtype; it runs its eager kernel");
    if (fusible && op.in_place) {
      // In place: the target must be an external no other input aliases, and the op must
      // not read the target through a view (x.add_(x.t()) reads what it overwrites).
      // A second write to the same tensor (its target the first write's value) writes
      // that external too.
      const InputRef root = in_place_root(p, op.target);
      if (root.kind == InputRef::Kind::External) {
        fusible = external_guard(p, root.index).alias_of < 0;
        for (int s = 0; fusible && s < p.num_externals; ++s)
          if (external_guard(p, s).alias_of == root.index) fusible = false;
        for (const InputRef& r : op.inputs)
          if (fusible && reads_view_of(r, root.index)) fusible = false;
      } else {
        // The first write into a value of this trace (a gradient made by the backward,
        // then clipped in place: `g.copy_(g * coef)`): the kernel stores into the
        // value's buffer, as into an external's. Not into a view (that writes its base),
        // not a second write, only element for element, and never reading the value
        // through a view.
        const int t = value_input(op.target);
        const TraceOp& target = p.ops[t];
        fusible = !target.in_place && op_info(target.op).family != OpFamily::View &&
                  target.meta.sizes == op.meta.sizes &&
                  target.meta.strides == contiguous_strides(target.meta.sizes) && !is_row_op(op.op);
        for (const InputRef& r : op.inputs)
          if (fusible && reads_view_of_value(r, t)) fusible = false;
        value_target = fusible ? t : -1;
      }
    }
    int k = -1;
    Dims full;
    if (fusible && is_row_op(op.op)) {
      full = input_sizes(p, op.inputs[0]);
      k = reduced_trailing_dims(op, static_cast<int64_t>(full.size()));
      const int64_t rows = k < 0 ? 0 : product(full, 0, full.size() - k);
      const int64_t cols = k < 0 ? 0 : product(full, full.size() - k, full.size());
      if (k <= 0 || (rows == 1 && cols > options.max_single_row)) {
        fusible = false;
        if (k > 0)
          plan.notes.push_back("v" + std::to_string(i) + " " + op.str() +
                               ": one long row; the eager parallel reduction runs it");
      }
    }
    auto run_eagerly = [&] {
      close();
      Step s;
      s.kind = fam == OpFamily::View ? Step::Kind::View : Step::Kind::Library;
      s.op = i;
      plan.steps.push_back(s);
      plan.step_of[i] = static_cast<int>(plan.steps.size()) - 1;
    };
    if (!fusible) {
      run_eagerly();
      continue;
    }
    // Try to join the open group.
    bool joins = false;
    if (open >= 0 && fuse) {
      FusionGroup& g = plan.steps[open].group;
      bool inputs_ok = true;
      for (const InputRef& r : op.inputs) {
        const int v = value_input(r);
        if (v >= 0 && group_of[v] == open && !is_fill_scalar(p.ops[v])) {
          // An in-group value used by a full-size op must be full or a keepdim row value
          // (or a one-element fill, the same value everywhere).
          const Dims& vs = p.ops[v].meta.sizes;
          const Dims& out = is_row_op(op.op) ? full : op.meta.sizes;
          if (vs != g.shape &&
              !(out == g.shape && g.reduced_dims > 0 &&
                vs == row_shape(g.shape, g.reduced_dims, true)) &&
              !(out != g.shape && g.reduced_dims > 0))
            inputs_ok = false;
        }
      }
      if (op.in_place && in_place_root(p, op.target).kind == InputRef::Kind::Value) {
        // A write into a value joins a pointwise group of its shape that did not make
        // the value and reads it only element for element (the group closes after it).
        inputs_ok = value_target >= 0 && g.reduced_dims == 0 && op.meta.sizes == g.shape &&
                    group_of[value_target] != open;
        for (int j : g.ops)
          for (const InputRef& r : p.ops[j].inputs)
            if (inputs_ok && reads_view_of_value(r, value_target)) inputs_ok = false;
      }
      for (InputRef t = op.in_place ? op.target : InputRef{};
           t.kind == InputRef::Kind::Value && p.ops[t.index].in_place; t = p.ops[t.index].target)
        if (group_of[plan.canonical[t.index]] != open) inputs_ok = false;  // an earlier write
      if (!written.empty()) {  // after an in-place write: element-for-element reads only
        if (is_row_op(op.op) || op.meta.sizes != g.shape) inputs_ok = false;
        for (const InputRef& r : op.inputs) {
          if (r.kind == InputRef::Kind::External && was_written(r.index) &&
              external_guard(p, r.index).sizes != g.shape)
            inputs_ok = false;
          if (r.kind == InputRef::Kind::Value && view_of[r.index] >= 0 &&
              was_written(view_of[r.index]))
            inputs_ok = false;
        }
      }
      if (op.in_place) {  // nothing in the group may read the target through a view
        const int root = in_place_root(p, op.target).index;
        for (int j : g.ops)
          for (const InputRef& r : p.ops[j].inputs)
            if (reads_view_of(r, root)) inputs_ok = false;
      }
      if (inputs_ok) {
        if (is_row_op(op.op)) {
          joins = full == g.shape && (g.reduced_dims == 0 || g.reduced_dims == k);
          if (joins) g.reduced_dims = k;
        } else {
          const Dims& s = op.meta.sizes;
          // A one-element fill (the 0 of `where(keep, x, 0.0)`) joins any group: its
          // value is the kernel's scalar argument.
          joins = s == g.shape || (is_fill_scalar(op) && !op.in_place) ||
                  (g.reduced_dims > 0 && (s == row_shape(g.shape, g.reduced_dims, true) ||
                                          s == row_shape(g.shape, g.reduced_dims, false)));
          if (joins && s != g.shape && op.in_place) joins = false;
          // A row-level op may only read in-group row values (never full ones).
          for (const InputRef& r : op.inputs) {
            const int v = value_input(r);
            if (joins && s != g.shape && v >= 0 && group_of[v] == open &&
                p.ops[v].meta.sizes == g.shape)
              joins = false;
          }
        }
      }
    }
    if (!joins && op.in_place && op.target.kind == InputRef::Kind::Value && value_target < 0) {
      // A second write whose first is not in the open group: its reads of the first
      // write's value would alias the store in a new kernel.
      run_eagerly();
      continue;
    }
    if (!joins) {
      Step s;
      s.kind = Step::Kind::Kernel;
      s.group.shape = is_row_op(op.op) ? full : op.meta.sizes;
      s.group.reduced_dims = is_row_op(op.op) ? k : 0;
      plan.steps.push_back(s);
      open = static_cast<int>(plan.steps.size()) - 1;
    }
    plan.steps[open].group.ops.push_back(i);
    group_of[i] = open;
    plan.step_of[i] = open;
    if (op.in_place) {
      // A pointwise group stays open after an in-place write (see `written`); any other
      // group closes: nothing after the write joins it.
      if (plan.steps[open].kind == Step::Kind::Kernel && plan.steps[open].group.reduced_dims == 0 &&
          in_place_root(p, op.target).kind == InputRef::Kind::External)
        written.push_back(in_place_root(p, op.target).index);
      else
        close();
    }
  }
}

}  // namespace

FusionPlan unplanned(const TraceProgram& p) {
  const int n = static_cast<int>(p.ops.size());
  FusionPlan plan;
  plan.canonical.resize(n);
  for (int i = 0; i < n; ++i) plan.canonical[i] = i;
  plan.step_of.assign(n, -1);
  plan.stored.assign(n, 0);
  plan.escapes.assign(n, 0);
  return plan;
}

void eliminate_common_subexpressions(const TraceProgram& p, const FusionOptions&,
                                     FusionPlan& plan) {
  const int n = static_cast<int>(p.ops.size());
  auto live = [&](int i) { return is_live(p, i); };
  int last_in_place = -1;
  for (int i = 0; i < n; ++i)
    if (p.ops[i].in_place) last_in_place = i;
  auto ref_canon = [&](InputRef r) {
    if (r.kind == InputRef::Kind::Value) r.index = plan.canonical[r.index];
    return r;
  };
  for (int j = 0; j < n; ++j) {
    const TraceOp& b = p.ops[j];
    const OpFamily f = op_info(b.op).family;
    if (b.in_place || live(j) || !b.scalar_kinds.empty() || f == OpFamily::Random ||
        f == OpFamily::Factory || has_effects(b.op))
      continue;
    for (int i = 0; i < j; ++i) {
      const TraceOp& a = p.ops[i];
      if (plan.canonical[i] != i || i <= last_in_place || a.op != b.op || a.in_place ||
          !(a.attrs == b.attrs) || a.inputs.size() != b.inputs.size() || !a.scalar_kinds.empty())
        continue;
      bool same = true;
      for (size_t k = 0; k < a.inputs.size() && same; ++k)
        same = ref_canon(a.inputs[k]) == ref_canon(b.inputs[k]);
      if (same) {
        plan.canonical[j] = i;
        ++plan.merged;
        break;
      }
    }
  }
}

void eliminate_dead_code(const TraceProgram& p, const FusionOptions&, FusionPlan& plan) {
  const int n = static_cast<int>(p.ops.size());
  auto live = [&](int i) { return is_live(p, i); };
  std::vector<uint8_t> needed(n, 0);
  for (int i = n - 1; i >= 0; --i) {
    if (plan.canonical[i] != i) continue;
    const TraceOp& op = p.ops[i];
    if (live(i) || is_held(p, i) || op.in_place || has_effects(op.op)) needed[i] = 1;
    if (!needed[i]) continue;
    for (const InputRef& r : op.inputs)
      if (r.kind == InputRef::Kind::Value) needed[plan.canonical[r.index]] = 1;
    if (op.in_place && op.target.kind == InputRef::Kind::Value)
      needed[plan.canonical[op.target.index]] = 1;
  }
  for (int j = 0; j < n; ++j)  // a merged op held by nobody keeps its canonical alive only if read
    if (plan.canonical[j] != j && needed[j]) needed[plan.canonical[j]] = 1;
  for (int i = 0; i < n; ++i) {
    if (plan.canonical[i] == i && !needed[i]) {
      plan.canonical[i] = -1;
      ++plan.dead;
    }
  }
}

void group_into_kernels(const TraceProgram& p, const FusionOptions& options, FusionPlan& plan) {
  make_steps(p, options, plan, true);
}

void one_kernel_per_op(const TraceProgram& p, const FusionOptions& options, FusionPlan& plan) {
  make_steps(p, options, plan, false);
}

namespace {

// The tensor whose bytes a value's are (views and in-place results share their base's),
// or -1 for an external's.
int storage_root(const TraceProgram& p, const FusionPlan& plan, std::vector<int>& root, int i) {
  if (root[i] != -2) return root[i];
  const TraceOp& op = p.ops[i];
  const InputRef* base = op.in_place                               ? &op.target
                         : op_info(op.op).family == OpFamily::View ? &op.inputs[0]
                                                                   : nullptr;
  int r = i;
  if (base)
    r = base->kind == InputRef::Kind::Value && plan.canonical[base->index] >= 0
            ? storage_root(p, plan, root, plan.canonical[base->index])
            : -1;
  return root[i] = r;
}

int64_t value_bytes(const TraceOp& op) {
  return dims_numel(op.meta.sizes) * itemsize(op.meta.dtype);
}

}  // namespace

void hoist_narrowing_ops(const TraceProgram& p, FusionPlan& plan) {
  const int n = static_cast<int>(p.ops.size());
  std::vector<int> root(n, -2);
  auto kernel_group = [&](int s) -> FusionGroup* {
    return s >= 0 && plan.steps[s].kind == Step::Kind::Kernel ? &plan.steps[s].group : nullptr;
  };
  for (int j = 0; j < n; ++j) {
    const TraceOp& op = p.ops[j];
    const OpFamily f = op_info(op.op).family;
    const int from = plan.canonical[j] == j ? plan.step_of[j] : -1;
    FusionGroup* old_group = kernel_group(from);
    if (!old_group || old_group->reduced_dims != 0 || old_group->ops.size() < 2 || op.in_place ||
        is_live(p, j) || is_held(p, j) || has_effects(op.op) ||
        !(f == OpFamily::Unary || f == OpFamily::Binary || f == OpFamily::Clamp ||
          f == OpFamily::Where))
      continue;
    // The widest tensor it reads, made by an op of its own (not a view, not in place).
    int wide = -1;
    for (const InputRef& r : op.inputs) {
      if (r.kind != InputRef::Kind::Value) continue;
      const int v = plan.canonical[r.index];
      if (v >= 0 && storage_root(p, plan, root, v) == v &&
          (wide < 0 || value_bytes(p.ops[v]) > value_bytes(p.ops[wide])))
        wide = v;
    }
    if (wide < 0 || value_bytes(op) >= value_bytes(p.ops[wide])) continue;
    // The last other step that reads it (or a view of it): a pointwise group of this shape.
    int to = -1;
    for (int i = 0; i < n; ++i) {
      if (i == j || plan.canonical[i] != i || plan.step_of[i] < 0) continue;
      const TraceOp& q = p.ops[i];
      auto reads_wide = [&](const InputRef& r) {
        return r.kind == InputRef::Kind::Value && plan.canonical[r.index] >= 0 &&
               storage_root(p, plan, root, plan.canonical[r.index]) == wide;
      };
      bool reads = q.in_place && reads_wide(q.target);
      for (const InputRef& r : q.inputs) reads = reads || reads_wide(r);
      if (reads) to = std::max(to, plan.step_of[i]);
    }
    FusionGroup* new_group = kernel_group(to);
    if (to >= from || !new_group || new_group->reduced_dims != 0 ||
        new_group->shape != op.meta.sizes || new_group->ops.back() > j)
      continue;
    // Its other inputs exist by then and nothing writes what it reads in between.
    bool ok = true;
    for (const InputRef& r : op.inputs)
      if (r.kind == InputRef::Kind::Value &&
          (plan.canonical[r.index] < 0 || plan.step_of[plan.canonical[r.index]] > to))
        ok = false;
    for (int i = 0; i < n && ok; ++i) {
      const TraceOp& w = p.ops[i];
      if (!w.in_place || plan.canonical[i] != i || plan.step_of[i] < to || plan.step_of[i] > from)
        continue;
      const InputRef t = in_place_root(p, w.target);
      for (const InputRef& r : op.inputs) {
        const InputRef a = in_place_root(p, r);
        if (t.kind == InputRef::Kind::Value && a.kind == InputRef::Kind::Value &&
            (plan.canonical[t.index] < 0 || plan.canonical[a.index] < 0))
          ok = false;
        else if (t.kind == a.kind &&
                 (t.kind == InputRef::Kind::External
                      ? t.index == a.index
                      : storage_root(p, plan, root, plan.canonical[t.index]) ==
                            storage_root(p, plan, root, plan.canonical[a.index])))
          ok = false;
      }
    }
    if (!ok) continue;
    old_group->ops.erase(std::find(old_group->ops.begin(), old_group->ops.end(), j));
    new_group->ops.push_back(j);
    plan.step_of[j] = to;
  }
}

void mark_stored(const TraceProgram& p, const FusionOptions&, FusionPlan& plan) {
  hoist_narrowing_ops(p, plan);
  const int n = static_cast<int>(p.ops.size());
  auto live = [&](int i) { return is_live(p, i); };
  auto value_input = [&](const InputRef& r) {
    return r.kind == InputRef::Kind::Value ? plan.canonical[r.index] : -1;
  };
  // The kernel step of each op's group (-1: a view or library step, or dead).
  std::vector<int> group_of(n, -1);
  for (int i = 0; i < n; ++i)
    if (plan.canonical[i] == i && plan.step_of[i] >= 0 &&
        plan.steps[plan.step_of[i]].kind == Step::Kind::Kernel)
      group_of[i] = plan.step_of[i];
  plan.stored.assign(n, 0);
  plan.escapes.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (plan.canonical[i] != i) continue;
    const TraceOp& op = p.ops[i];
    if (group_of[i] < 0 || op.in_place || live(i) || is_held(p, i)) plan.stored[i] = 1;
    auto mark_read = [&](const InputRef& r) {
      const int v = value_input(r);
      // A one-element fill read by another kernel group: that kernel makes the value
      // itself from the fill's scalar (lower.cpp), nothing is stored.
      if (v >= 0 && group_of[i] >= 0 && group_of[v] >= 0 && &r != &op.target &&
          is_fill_scalar(p.ops[v]))
        return;
      if (v >= 0 && group_of[v] != group_of[i]) plan.stored[v] = 1;
      if (v >= 0 && group_of[v] < 0) plan.stored[v] = 1;
    };
    for (const InputRef& r : op.inputs) mark_read(r);
    if (op.in_place) mark_read(op.target);
  }
  for (int j = 0; j < n; ++j)
    if (plan.canonical[j] >= 0 && plan.canonical[j] != j && (live(j) || is_held(p, j)))
      plan.stored[plan.canonical[j]] = 1;
  // Escapes: held by the user (or a view of it is), never in the arena.
  for (int i = n - 1; i >= 0; --i) {
    if (plan.canonical[i] != i || !plan.stored[i]) continue;
    const TraceOp& op = p.ops[i];
    if (op.in_place) continue;  // written into its target
    if (live(i)) plan.escapes[i] = 1;
    if (plan.escapes[i] && op_info(op.op).family == OpFamily::View) {
      const int v = value_input(op.inputs[0]);
      if (v >= 0) plan.escapes[v] = 1;
    }
  }
}

std::vector<std::vector<int>> value_readers(const TraceProgram& p, const FusionPlan& plan) {
  const int n = static_cast<int>(p.ops.size());
  std::vector<std::vector<int>> readers(n);
  for (int i = 0; i < n; ++i) {
    if (plan.canonical[i] != i) continue;
    auto note = [&](const InputRef& r) {
      if (r.kind == InputRef::Kind::Value && plan.canonical[r.index] >= 0)
        readers[plan.canonical[r.index]].push_back(i);
    };
    for (const InputRef& r : p.ops[i].inputs) note(r);
    if (p.ops[i].in_place) note(p.ops[i].target);
  }
  return readers;
}

}  // namespace kiln::jit
