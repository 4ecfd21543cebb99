// The `attention` pass and its step at run time (see attention_rewrite.h).
#include "jit/attention_rewrite.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "jit/fusion.h"
#include "jit/plan_passes.h"
#include "ops/api.h"
#include "ops/dispatch.h"
#include "tracer/config.h"

namespace kiln::jit {
namespace {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;
using Rewrite = AttentionRewrite;

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

bool flag(const std::vector<bool>& v, int i) { return i < static_cast<int>(v.size()) && v[i]; }

// The strides a value or external has whatever the run (its guard, or the op's metadata:
// views carry theirs, other values are contiguous).
Dims strides_of(const TraceProgram& p, const InputRef& r) {
  if (r.kind == InputRef::Kind::External) return external_guard(p, r.index).strides;
  const TraceOp& op = p.ops[r.index];
  if (op.in_place) return strides_of(p, op.target);
  if (op_info(op.op).family == OpFamily::View) return op.meta.strides;
  return contiguous_strides(op.meta.sizes);
}

// CUDA's aligned_rows on what the trace knows: last stride 1, the others (of dims over 1)
// whole multiples of `bytes`. The storage offset is checked at run time.
bool rows_aligned(const Dims& sizes, const Dims& strides, DType d, int64_t bytes) {
  if (bytes == 0) return true;
  const int64_t vec = bytes / itemsize(d);
  if (sizes.empty() || strides.back() != 1) return false;
  for (size_t i = 0; i + 1 < sizes.size(); ++i)
    if (sizes[i] > 1 && strides[i] % vec != 0) return false;
  return true;
}

// Whether `small` broadcasts to `full` without growing it (right-aligned dims 1 or equal).
bool broadcasts_to(const Dims& small, const Dims& full) {
  if (small.size() > full.size()) return false;
  const size_t off = full.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i)
    if (small[i] != 1 && small[i] != full[off + i]) return false;
  return true;
}

bool is_row_op(OpId id) {
  const OpFamily f = op_info(id).family;
  return f == OpFamily::Reduce || f == OpFamily::Softmax || f == OpFamily::LayerNorm;
}

// A run of 0, 1, ..., n - 1 along one dim: arange(n) through unsqueeze / view ops.
struct IndexRun {
  int arange = -1;   // the arange op
  int64_t n = 0;     // its length
  int from_end = 0;  // the dim holding it, counted from the last (1: last); 0: all dims 1
};

bool index_run(const TraceProgram& p, const FusionPlan& plan, const InputRef& r, IndexRun* out) {
  if (r.kind != InputRef::Kind::Value || plan.canonical[r.index] < 0) return false;
  const Dims& shape = p.ops[plan.canonical[r.index]].meta.sizes;
  int v = plan.canonical[r.index];
  while (!p.ops[v].in_place && (p.ops[v].op == OpId::Unsqueeze || p.ops[v].op == OpId::View)) {
    const InputRef& base = p.ops[v].inputs[0];
    if (base.kind != InputRef::Kind::Value || plan.canonical[base.index] < 0) return false;
    v = plan.canonical[base.index];
  }
  const TraceOp& a = p.ops[v];
  if (a.op != OpId::Arange || a.in_place || a.meta.sizes.size() != 1 || a.scalar_kinds.size() != 3)
    return false;
  out->arange = v;
  out->n = a.meta.sizes[0];
  out->from_end = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (out->from_end != 0 || shape[d] != out->n) return false;
    out->from_end = static_cast<int>(shape.size() - d);
  }
  return true;
}

bool is_run_along(const IndexRun& run, int from_end, int64_t length) {
  return run.n == length && (run.from_end == from_end || (run.from_end == 0 && length == 1));
}

// cond == (col <= row) (keep) or (col > row) (drop) for rows [L] and cols [S]: the causal
// mask; the aranges' start and step are checked at run time.
bool causal_cond(const TraceProgram& p, const FusionPlan& plan, const InputRef& cond, bool keep,
                 int64_t L, int64_t S, std::vector<Rewrite::ScalarCheck>* checks) {
  if (cond.kind != InputRef::Kind::Value || plan.canonical[cond.index] < 0) return false;
  const TraceOp& c = p.ops[plan.canonical[cond.index]];
  if (c.in_place || c.inputs.size() != 2 || !c.scalar_kinds.empty()) return false;
  // keep: le(cols, rows) or ge(rows, cols); drop: gt(cols, rows) or lt(rows, cols).
  const bool cols_first = c.op == (keep ? OpId::Le : OpId::Gt);
  const bool rows_first = c.op == (keep ? OpId::Ge : OpId::Lt);
  if (!cols_first && !rows_first) return false;
  IndexRun cols, rows;
  if (!index_run(p, plan, c.inputs[cols_first ? 0 : 1], &cols) ||
      !index_run(p, plan, c.inputs[cols_first ? 1 : 0], &rows) || !is_run_along(cols, 1, S) ||
      !is_run_along(rows, 2, L))
    return false;
  for (int a : {cols.arange, rows.arange}) {
    checks->push_back({a, 0, 0.0});  // start
    checks->push_back({a, 2, 1.0});  // step
  }
  return true;
}

// A one-element full() whose value is a run-time scalar: the fill of a masked_fill.
bool is_fill(const TraceProgram& p, const FusionPlan& plan, const InputRef& r) {
  if (r.kind != InputRef::Kind::Value || plan.canonical[r.index] < 0) return false;
  const TraceOp& op = p.ops[plan.canonical[r.index]];
  return is_fill_scalar(op) && op.scalar_kinds.size() == 1;
}

class Matcher {
 public:
  Matcher(const TraceProgram& p, const FusionPlan& plan, const AttentionKernels& kernels)
      : p_(p), plan_(plan), kernels_(kernels), readers_(value_readers(p, plan)) {}

  // The rewrite of the pattern ending in softmax op w, if it is one and safe.
  bool match(int w, Rewrite* out) {
    const TraceOp& sm = p_.ops[w];
    if (sm.op != OpId::Softmax || plan_.canonical[w] != w) return false;
    const int64_t rank = static_cast<int64_t>(sm.meta.sizes.size());
    if (rank < 2 || sm.attrs.dim != rank - 1 || !private_to(w, -1)) return false;
    const int y = readers_[w][0];
    const TraceOp& mm = p_.ops[y];
    if (mm.op != OpId::Matmul || mm.in_place || mm.inputs.size() != 2 || value(mm.inputs[0]) != w ||
        value(mm.inputs[1]) == w || !private_to(w, y))
      return false;
    Rewrite r;
    // Back from the softmax: [mask], [scale], scores.
    int x = value(sm.inputs[0]);
    int masked = -1, scaled = -1;
    InputRef mask, fill;
    if (x >= 0 && (p_.ops[x].op == OpId::Add || p_.ops[x].op == OpId::Where)) {
      const TraceOp& m = p_.ops[x];
      if (m.in_place || !m.scalar_kinds.empty() || !private_to(x, w)) return false;
      int inner = -1;
      if (m.op == OpId::Add && m.inputs.size() == 2) {
        const int side = scores_side(m.inputs[0]) ? 0 : scores_side(m.inputs[1]) ? 1 : -1;
        if (side < 0) return false;
        inner = value(m.inputs[side]);
        mask = m.inputs[1 - side];
        r.mask = Rewrite::Mask::Additive;
      } else if (m.op == OpId::Where && m.inputs.size() == 3) {
        const bool keep = is_fill(p_, plan_, m.inputs[2]) && scores_side(m.inputs[1]);
        const bool drop = !keep && is_fill(p_, plan_, m.inputs[1]) && scores_side(m.inputs[2]);
        if (!keep && !drop) return false;
        inner = value(m.inputs[keep ? 1 : 2]);
        fill = m.inputs[keep ? 2 : 1];
        mask = m.inputs[0];
        r.mask = keep ? Rewrite::Mask::Keep : Rewrite::Mask::Drop;
      } else {
        return false;
      }
      masked = x;
      x = inner;
      if (!private_to(x, masked)) return false;
    }
    if (x >= 0 && (p_.ops[x].op == OpId::Mul || p_.ops[x].op == OpId::Div)) {
      const TraceOp& s = p_.ops[x];
      if (s.in_place || s.inputs.size() != 1 || s.scalar_kinds.size() != 1 ||
          (s.op == OpId::Div && s.attrs.scalar_first))
        return false;
      scaled = x;
      r.scaled = x;
      r.scale_divides = s.op == OpId::Div;
      x = value(s.inputs[0]);
      if (!private_to(x, scaled)) return false;
    }
    if (x < 0 || p_.ops[x].op != OpId::Matmul || p_.ops[x].in_place || p_.ops[x].inputs.size() != 2)
      return false;
    const int scores = x;
    const TraceOp& qk = p_.ops[scores];
    const InputRef q = qk.inputs[0], kt = qk.inputs[1], v = mm.inputs[1];
    if (!shapes_and_dtypes_fit(q, kt, v, scores, scaled, masked, w, y)) return false;
    if (masked >= 0 && !mask_fits(r, mask, scores)) return false;
    int fill_op = -1;
    if (r.mask == Rewrite::Mask::Keep || r.mask == Rewrite::Mask::Drop) {
      fill_op = plan_.canonical[fill.index];
      if (!private_to(fill_op, masked)) return false;
      r.checks.push_back({fill_op, 0, kMinusInfinity});
    }
    if (r.mask != Rewrite::Mask::None && r.mask != Rewrite::Mask::Additive) {
      const Dims& qs = input_sizes(p_, q);
      const Dims& ks = input_sizes(p_, kt);
      r.causal = causal_cond(p_, plan_, mask, r.mask == Rewrite::Mask::Keep, qs[qs.size() - 2],
                             ks.back(), &r.checks);
    }
    if (r.mask != Rewrite::Mask::None && !r.causal && !kernels_.masks) return false;
    for (int j = scores + 1; j < y; ++j)  // nothing written in place between the matmuls
      if (plan_.canonical[j] == j && p_.ops[j].in_place) return false;
    // The replaced ops, and the step's inputs.
    r.inputs = {q, kt, v};
    auto arg = [&](const InputRef& ref, const std::vector<int>& made) {
      const int val = value(ref);
      for (size_t k = 0; k < made.size(); ++k)
        if (made[k] == val) return -1 - static_cast<int>(k);
      for (size_t k = 0; k < r.inputs.size(); ++k)
        if (r.inputs[k] == ref) return static_cast<int>(k);
      r.inputs.push_back(ref);
      return static_cast<int>(r.inputs.size()) - 1;
    };
    if (masked >= 0) {
      r.inputs.push_back(mask);
      r.mask_input = 3;
    }
    std::vector<int> ops;
    for (int op : {fill_op, scores, scaled, masked, w, y})
      if (op >= 0) ops.push_back(op);
    std::sort(ops.begin(), ops.end());
    std::vector<int> made;
    for (int op : ops) {
      const TraceOp& t = p_.ops[op];
      Rewrite::ReplacedOp rop;
      rop.op = op;
      rop.id = t.op;
      rop.attrs = t.attrs;
      rop.scalar = op == scaled ? 0 : op == fill_op ? 1 : -1;
      for (const InputRef& ref : t.inputs) rop.args.push_back(arg(ref, made));
      r.replaced.push_back(rop);
      made.push_back(op);
    }
    *out = std::move(r);
    return true;
  }

 private:
  int value(const InputRef& r) const {
    return r.kind == InputRef::Kind::Value ? plan_.canonical[r.index] : -1;
  }

  // Whether the value is held by nobody but the pattern: read once, by `reader` (-1: by
  // anyone), not held by the user, not escaping, not written in place, and no op merged
  // into it held either.
  bool private_to(int i, int reader) const {
    if (i < 0 || plan_.canonical[i] != i || p_.ops[i].in_place) return false;
    if (readers_[i].size() != 1 || (reader >= 0 && readers_[i][0] != reader)) return false;
    if (flag(p_.live, i) || flag(p_.held, i) || plan_.escapes[i]) return false;
    for (size_t j = 0; j < p_.ops.size(); ++j)
      if (plan_.canonical[j] == i &&
          (flag(p_.live, static_cast<int>(j)) || flag(p_.held, static_cast<int>(j))))
        return false;
    return true;
  }

  // Whether ref is the scores (a matmul) or the scores scaled by a scalar.
  bool scores_side(const InputRef& ref) const {
    const int x = value(ref);
    if (x < 0) return false;
    const OpId id = p_.ops[x].op;
    if (id == OpId::Matmul) return true;
    if ((id == OpId::Mul || id == OpId::Div) && p_.ops[x].inputs.size() == 1) {
      const int in = value(p_.ops[x].inputs[0]);
      return in >= 0 && p_.ops[in].op == OpId::Matmul;
    }
    return false;
  }

  bool shapes_and_dtypes_fit(const InputRef& q, const InputRef& kt, const InputRef& v, int scores,
                             int scaled, int masked, int w, int y) const {
    const Dims &qs = input_sizes(p_, q), &ks = input_sizes(p_, kt), &vs = input_sizes(p_, v);
    if (qs.size() < 2 || ks.size() < 2 || vs.size() < 2) return false;
    const int64_t L = qs[qs.size() - 2], E = qs.back(), S = ks.back(), Ev = vs.back();
    if (ks[ks.size() - 2] != E || vs[vs.size() - 2] != S) return false;
    const Dims& ss = p_.ops[scores].meta.sizes;
    if (ss.size() < 2 || ss[ss.size() - 2] != L || ss.back() != S) return false;
    for (int op : {scaled, masked, w})
      if (op >= 0 && p_.ops[op].meta.sizes != ss) return false;
    const DType d = p_.ops[y].meta.dtype;
    for (const InputRef& r : {q, kt, v})
      if (input_dtype(p_, r) != d) return false;
    for (int op : {scores, scaled, masked, w})
      if (op >= 0 && p_.ops[op].meta.dtype != d) return false;
    if (std::find(kernels_.dtypes.begin(), kernels_.dtypes.end(), d) == kernels_.dtypes.end())
      return false;
    const Dims& ys = p_.ops[y].meta.sizes;
    if (kernels_.max_rank > 0 && static_cast<int>(ys.size()) > kernels_.max_rank) return false;
    if (!kernels_.head_sizes.empty() &&
        (E != Ev || std::find(kernels_.head_sizes.begin(), kernels_.head_sizes.end(), E) ==
                        kernels_.head_sizes.end()))
      return false;
    // k is kt's transpose: swap its last two sizes and strides.
    Dims ksz = ks, kst = strides_of(p_, kt);
    std::swap(ksz[ksz.size() - 1], ksz[ksz.size() - 2]);
    std::swap(kst[kst.size() - 1], kst[kst.size() - 2]);
    return rows_aligned(qs, strides_of(p_, q), d, kernels_.row_alignment) &&
           rows_aligned(ksz, kst, d, kernels_.row_alignment) &&
           rows_aligned(vs, strides_of(p_, v), d, kernels_.row_alignment);
  }

  bool mask_fits(const Rewrite& r, const InputRef& mask, int scores) const {
    const DType want = r.mask == Rewrite::Mask::Additive ? p_.ops[scores].meta.dtype : DType::Bool;
    return input_dtype(p_, mask) == want &&
           broadcasts_to(input_sizes(p_, mask), p_.ops[scores].meta.sizes);
  }

  const TraceProgram& p_;
  const FusionPlan& plan_;
  const AttentionKernels& kernels_;
  std::vector<std::vector<int>> readers_;
};

// Whether the kernel groups keep working without the replaced ops: a group that loses
// its only row ops must be left with ops of its full shape (it becomes pointwise).
bool groups_survive(const TraceProgram& p, const FusionPlan& plan, const std::vector<int>& gone) {
  auto is_gone = [&](int i) { return std::find(gone.begin(), gone.end(), i) != gone.end(); };
  for (const Step& st : plan.steps) {
    if (st.kind != Step::Kind::Kernel || st.group.reduced_dims == 0) continue;
    bool touched = false, row_left = false, full_only = true;
    for (int i : st.group.ops) {
      if (is_gone(i)) {
        touched = true;
        continue;
      }
      row_left = row_left || is_row_op(p.ops[i].op);
      full_only = full_only && (p.ops[i].meta.sizes == st.group.shape || is_fill_scalar(p.ops[i]));
    }
    if (touched && !row_left && !full_only) return false;
  }
  return true;
}

// Takes the replaced ops out of their steps; the final matmul's step becomes the
// attention step.
void apply(const TraceProgram& p, FusionPlan& plan, const Rewrite& r) {
  const int n = static_cast<int>(p.ops.size());
  std::vector<int> gone;
  for (const Rewrite::ReplacedOp& op : r.replaced)
    if (op.op != r.out()) gone.push_back(op.op);
  auto is_gone = [&](int i) { return std::find(gone.begin(), gone.end(), i) != gone.end(); };
  std::vector<Step> kept;
  for (Step& st : plan.steps) {
    if (st.kind != Step::Kind::Kernel) {
      if (!is_gone(st.op)) kept.push_back(std::move(st));
      continue;
    }
    auto& ops = st.group.ops;
    const size_t before = ops.size();
    ops.erase(std::remove_if(ops.begin(), ops.end(), is_gone), ops.end());
    if (ops.empty()) continue;
    if (ops.size() != before &&
        std::none_of(ops.begin(), ops.end(), [&](int i) { return is_row_op(p.ops[i].op); }))
      st.group.reduced_dims = 0;
    kept.push_back(std::move(st));
  }
  plan.steps = std::move(kept);
  plan.step_of.assign(n, -1);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step& st = plan.steps[s];
    if (st.kind == Step::Kind::Kernel)
      for (int i : st.group.ops) plan.step_of[i] = static_cast<int>(s);
    else
      plan.step_of[st.op] = static_cast<int>(s);
  }
  for (int i : gone) {
    plan.step_of[i] = plan.step_of[r.out()];
    plan.stored[i] = 0;
    plan.escapes[i] = 0;
  }
  for (int i = 0; i < n; ++i)
    if (plan.canonical[i] >= 0 && plan.canonical[i] != i)
      plan.step_of[i] = plan.step_of[plan.canonical[i]];
  for (const InputRef& in : r.inputs)
    if (in.kind == InputRef::Kind::Value) plan.stored[plan.canonical[in.index]] = 1;
  plan.attention[r.out()] = r;
  plan.notes.push_back(r.str());
}

}  // namespace

AttentionKernels attention_kernels(DeviceType target) {
  AttentionKernels k;
  if (target == DeviceType::CUDA) {
    k.enabled = true;
    k.dtypes = {DType::Float32, DType::BFloat16, DType::Float16};
    k.head_sizes = {64, 128};
    k.max_rank = 4;
    k.row_alignment = 16;
  } else {
    k.enabled = tracer::config().cpu_attention;
    k.masks = true;
    k.dtypes = {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16};
  }
  return k;
}

std::string AttentionRewrite::str() const {
  std::string ops;
  for (const ReplacedOp& op : replaced)
    if (op.id != OpId::Full)
      ops += (ops.empty() ? "" : ", ") + std::string(op_name(op.id)) + " v" + std::to_string(op.op);
  const char* how = causal                   ? " (causal)"
                    : mask == Mask::Additive ? " (additive mask)"
                    : mask != Mask::None     ? " (bool mask)"
                                             : "";
  return ops + ": softmax(q @ k^T * scale) @ v as one fused attention op" + how;
}

void rewrite_attention(const TraceProgram& p, const FusionOptions& options, FusionPlan& plan) {
  if (!options.attention.enabled) return;
  for (size_t w = 0; w < p.ops.size(); ++w) {
    if (p.ops[w].op != OpId::Softmax) continue;
    Rewrite r;
    if (!Matcher(p, plan, options.attention).match(static_cast<int>(w), &r)) continue;
    std::vector<int> gone;
    for (const Rewrite::ReplacedOp& op : r.replaced)
      if (op.op != r.out()) gone.push_back(op.op);
    const int scores = std::find_if(r.replaced.begin(), r.replaced.end(), [](const auto& op) {
                         return op.id == OpId::Matmul;
                       })->op;
    const int first = plan.step_of[scores], last = plan.step_of[r.out()];
    if (first < 0 || last < 0 || plan.steps[first].kind != Step::Kind::Library ||
        plan.steps[first].op != scores || plan.steps[last].kind != Step::Kind::Library ||
        plan.steps[last].op != r.out() || !groups_survive(p, plan, gone))
      continue;
    apply(p, plan, r);
  }
}

namespace {

Dims with_last(const Dims& batch, int64_t a, int64_t b) {
  Dims out = batch;
  out.push_back(a);
  out.push_back(b);
  return out;
}

// The fused op into out; false where the target's kernel does not take these inputs.
bool run_fused(const Rewrite& r, const OpCall& call, const Tensor& out) {
  const Dims batch(out.sizes().begin(), out.sizes().end() - 2);
  const Tensor& q = call.inputs[0];
  const Tensor k = call.inputs[1].transpose(-2, -1);
  const Tensor& v = call.inputs[2];
  const int64_t L = q.size(-2), S = k.size(-2);
  const double raw = call.scalars[0].to_double();
  OpCall a{OpId::Attention,
           {q.expand(with_last(batch, L, q.size(-1))), k.expand(with_last(batch, S, k.size(-1))),
            v.expand(with_last(batch, S, v.size(-1)))},
           {Scalar(r.scale_divides ? 1.0 / raw : raw)},
           {}};
  a.attrs.causal = r.causal;
  if (r.mask_input >= 0 && !r.causal) {
    Tensor m = call.inputs[static_cast<size_t>(r.mask_input)];
    if (r.mask == Rewrite::Mask::Drop) m = eq(m, Scalar(false));
    a.inputs.push_back(m.expand(with_last(batch, L, S)));
  }
  if (q.device().is_cuda() &&
      !attention_cuda_supports(a.inputs[0], a.inputs[1], a.inputs[2],
                               a.inputs.size() > 3 ? a.inputs[3] : Tensor()))
    return false;
  const Tensor packed = dispatch(a);
  a.op = OpId::AttentionOutput;
  a.inputs.insert(a.inputs.begin(), packed);
  dispatch_into(a, out);
  return true;
}

// The replaced ops, eagerly, in their order.
void run_replaced(const Rewrite& r, const OpCall& call, const Tensor& out) {
  std::vector<Tensor> made;
  for (size_t k = 0; k < r.replaced.size(); ++k) {
    const Rewrite::ReplacedOp& op = r.replaced[k];
    OpCall c{op.id, {}, {}, op.attrs};
    for (int a : op.args)
      c.inputs.push_back(a >= 0 ? call.inputs[static_cast<size_t>(a)]
                                : made[static_cast<size_t>(-1 - a)]);
    if (op.scalar >= 0) c.scalars.push_back(call.scalars[static_cast<size_t>(op.scalar)]);
    if (k + 1 == r.replaced.size())
      dispatch_into(c, out);
    else
      made.push_back(dispatch(c));
  }
}

}  // namespace

void run_attention_step(const AttentionRewrite& r, const OpCall& call, const Tensor& out) {
  NoHookScope untraced;
  bool checks_hold = true;
  for (size_t c = 0; c < r.checks.size(); ++c)
    checks_hold = checks_hold && call.scalars[1 + c].to_double() == r.checks[c].value;
  if (checks_hold && run_fused(r, call, out)) return;
  run_replaced(r, call, out);
}

}  // namespace kiln::jit
