#include "jit/lower.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "jit/plan_passes.h"
#include "runtime/error.h"
#include "tracer/config.h"

namespace kiln::jit {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

namespace {

bool is_comparison(OpId op) { return op_info(op).dtype_rule == DTypeRule::Bool; }

class Lowerer {
 public:
  Lowerer(const TraceProgram& p, const FusionPlan& plan, const FusionGroup& g)
      : p_(p), plan_(plan), g_(g), base_(scalar_bases(p)) {
    rank_ = static_cast<int>(g.shape.size());
    row_keep_ = row_drop_ = Dims();
    for (int d = 0; d < rank_; ++d) {
      if (d < rank_ - g.reduced_dims) {
        row_keep_.push_back(g.shape[d]);
        row_drop_.push_back(g.shape[d]);
      } else {
        row_keep_.push_back(1);
      }
    }
  }

  LoweredKernel run(bool simplify_ir) {
    out_.kernel.kind = g_.reduced_dims ? Kernel::Kind::Row : Kernel::Kind::Pointwise;
    for (int i : g_.ops) lower_op(i);
    for (int i : g_.ops) {
      if (!plan_.stored[i]) continue;
      const TraceOp& op = p_.ops[i];
      int32_t operand;
      if (op.in_place) {
        operand = operand_for(in_place_root(p_, op.target), op.meta.sizes);
      } else {
        operand = operand_for(InputRef{InputRef::Kind::Value, i}, op.meta.sizes, true);
      }
      out_.kernel.operands[operand].stored = true;
      out_.kernel.operands[operand].index_only = false;  // a rand output's index operand
      const int32_t v = cast(values_.at(i), out_.kernel.operands[operand].dtype);
      out_.kernel.stores.push_back(KStore{v, operand});
    }
    if (simplify_ir) simplify(out_.kernel);
    collapse();
    assign_levels();
    return std::move(out_);
  }

 private:
  // ---- nodes
  int32_t node(KOp op, DType dtype, int32_t a = -1, int32_t b = -1, int32_t c = -1) {
    KNode n;
    n.op = op;
    n.dtype = dtype;
    n.in[0] = a;
    n.in[1] = b;
    n.in[2] = c;
    return out_.kernel.add(n);
  }
  // A pointwise op's math: its functor from ops/pointwise_math.h.
  int32_t math(OpId fn, DType dtype, int32_t a, int32_t b = -1, bool approximate = false) {
    return out_.kernel.add(math_node(fn, dtype, a, b, approximate));
  }
  int32_t constant(double v, DType dtype) {
    KNode n;
    n.op = KOp::Const;
    n.dtype = dtype;
    n.value = v;
    return out_.kernel.add(n);
  }
  int32_t cast(int32_t x, DType d) {
    return out_.kernel.nodes[x].dtype == d ? x : node(KOp::Cast, d, x);
  }
  int32_t scalar(int op, int which) {
    const int index = base_[op] + which;
    const Scalar::Kind kind = p_.ops[op].scalar_kinds[which];
    int slot = -1;
    for (size_t s = 0; s < out_.scalar_slots.size(); ++s)
      if (out_.scalar_slots[s] == index) slot = static_cast<int>(s);
    if (slot < 0) {
      slot = static_cast<int>(out_.scalar_slots.size());
      out_.scalar_slots.push_back(index);
      out_.kernel.scalar_is_float.push_back(kind == Scalar::Kind::Float);
    }
    KNode n;
    n.op = KOp::Scalar;
    n.slot = slot;
    n.dtype = kind == Scalar::Kind::Float ? DType::Float64
              : kind == Scalar::Kind::Int ? DType::Int64
                                          : DType::Bool;
    return out_.kernel.add(n);
  }

  // ---- operands
  void source_layout(const InputRef& r, Dims* sizes, Dims* strides) const {
    if (r.kind == InputRef::Kind::External) {
      const tracer::TensorGuard& g = external_guard(p_, r.index);
      *sizes = g.sizes;
      *strides = g.strides;
    } else if (p_.ops[r.index].in_place) {
      // The value of an in-place op is its target, laid out as the target is (a
      // transposed or sliced tensor), not as the op's contiguous result meta.
      source_layout(p_.ops[r.index].target, sizes, strides);
    } else {
      *sizes = p_.ops[r.index].meta.sizes;
      *strides = p_.ops[r.index].meta.strides;
    }
  }
  DType source_dtype(const InputRef& r) const { return input_dtype(p_, r); }

  // Strides of a tensor read (or written) at shape `at` (full, keepdim-row or row shape),
  // over the group's full shape.
  Dims map_strides(const InputRef& r, const Dims& at, bool fresh_output) const {
    Dims sizes, strides;
    if (fresh_output) {
      sizes = at;
      strides = contiguous_strides(at);
    } else {
      source_layout(r, &sizes, &strides);
    }
    const int ar = static_cast<int>(at.size()), tr = static_cast<int>(sizes.size());
    Dims b(ar, 0);
    for (int i = 0; i < ar; ++i) {
      const int td = i - (ar - tr);
      if (td < 0) continue;
      if (sizes[td] == at[i])
        b[i] = at[i] == 1 ? 0 : strides[td];
      else if (sizes[td] != 1)
        throw Unsupported("operand shape " + dims_str(sizes) + " does not broadcast to " +
                          dims_str(at));
    }
    if (at == g_.shape || static_cast<int>(at.size()) == rank_) return b;
    if (g_.reduced_dims > 0 && at == row_drop_) {
      Dims full(rank_, 0);
      for (int i = 0; i < ar; ++i) full[i] = b[i];
      return full;
    }
    throw Unsupported("operand shape " + dims_str(at) + " does not fit the group shape " +
                      dims_str(g_.shape));
  }

  int32_t operand_for(const InputRef& r, const Dims& at, bool fresh_output = false) {
    const Dims strides = map_strides(r, at, fresh_output);
    for (size_t i = 0; i < out_.operands.size(); ++i)
      if (out_.operands[i].source == r && out_.operands[i].strides == strides)
        return static_cast<int32_t>(i);
    out_.operands.push_back(OperandBinding{r, strides});
    KOperand o;
    o.dtype = fresh_output ? p_.ops[r.index].meta.dtype : source_dtype(r);
    out_.kernel.operands.push_back(o);
    return static_cast<int32_t>(out_.operands.size()) - 1;
  }

  int32_t input(const InputRef& r, const Dims& at) {
    if (r.kind == InputRef::Kind::Value) {
      const int v = plan_.canonical[r.index];
      auto it = values_.find(v);
      if (it != values_.end()) return it->second;
      if (is_fill_scalar(p_.ops[v]))  // made here from its scalar (plan_passes.h)
        return values_[v] = cast(scalar(v, 0), p_.ops[v].meta.dtype);
      const InputRef canon{InputRef::Kind::Value, v};
      KNode n;
      n.op = KOp::Load;
      n.operand = operand_for(canon, at);
      n.dtype = source_dtype(canon);
      out_.kernel.operands[n.operand].loaded = true;
      return out_.kernel.add(n);
    }
    KNode n;
    n.op = KOp::Load;
    n.operand = operand_for(r, at);
    n.dtype = source_dtype(r);
    out_.kernel.operands[n.operand].loaded = true;
    return out_.kernel.add(n);
  }

  // ---- ops
  void lower_op(int i) {
    const TraceOp& op = p_.ops[i];
    const DType out = op.meta.dtype;
    const Dims& at = op.meta.sizes;
    const OpFamily fam = op_info(op.op).family;
    int32_t v = -1;
    if (fam == OpFamily::Unary) {
      const int32_t x = input(op.inputs[0], at);
      if (op.op == OpId::Cast)
        v = cast(x, out);
      else
        v = math(op.op, out, cast(x, out), -1, op.op == OpId::Gelu && op.attrs.approximate_tanh);
    } else if (fam == OpFamily::Clamp) {
      v = cast(input(op.inputs[0], at), out);
      int s = 0;
      if (op.attrs.has_min) {
        const int32_t lo = cast(scalar(i, s++), out);
        v = node(KOp::Where, out, math(OpId::Lt, DType::Bool, v, lo), lo, v);
      }
      if (op.attrs.has_max) {
        const int32_t hi = cast(scalar(i, s++), out);
        v = node(KOp::Where, out, math(OpId::Gt, DType::Bool, v, hi), hi, v);
      }
    } else if (fam == OpFamily::Binary) {
      int32_t a, b;
      DType compute = out;
      if (op.inputs.size() == 2) {
        a = input(op.inputs[0], at);
        b = input(op.inputs[1], at);
        if (is_comparison(op.op))
          compute = promote_types(out_.kernel.nodes[a].dtype, out_.kernel.nodes[b].dtype);
      } else {
        const int32_t t = input(op.inputs[0], at), s = scalar(i, 0);
        a = op.attrs.scalar_first ? s : t;
        b = op.attrs.scalar_first ? t : s;
        if (is_comparison(op.op)) {
          const DType td = out_.kernel.nodes[t].dtype;
          const Scalar::Kind kind = op.scalar_kinds[0];
          compute = is_floating(td)                                   ? td
                    : kind == Scalar::Kind::Float                     ? DType::Float64
                    : td == DType::Bool && kind == Scalar::Kind::Bool ? DType::Int32
                                                                      : DType::Int64;
        }
      }
      if (compute == DType::Bool) compute = DType::Int32;
      // 16-bit values compute in float32 with the scalar unrounded, then round, as the
      // eager kernels do: a bfloat16 pow(x, 2.01) is not pow(x, 2), nor x * 1.001 x * 1.
      if (compute == DType::Float16 || compute == DType::BFloat16) compute = DType::Float32;
      v = math(op.op, is_comparison(op.op) ? out : compute, cast(a, compute), cast(b, compute));
      v = cast(v, out);
    } else if (fam == OpFamily::Where) {
      const int32_t c = cast(input(op.inputs[0], at), DType::Bool);
      v = node(KOp::Where, out, c, cast(input(op.inputs[1], at), out),
               cast(input(op.inputs[2], at), out));
    } else if (op.op == OpId::Full) {
      v = cast(scalar(i, 0), out);
    } else if (fam == OpFamily::Random) {
      v = cast(random(i, op), out);
    } else {
      v = lower_row_op(i, op, out);
    }
    values_[i] = v;
  }

  // Floating sums accumulate in double, like the eager kernels (ops/cpu/
  // reduce_accumulators.h), so fused and eager results agree to the last few ulps even
  // where a cancellation follows (x - mean(x) of a constant row); integer sums in `out`.
  DType acc_type(DType out) const { return is_floating(out) ? DType::Float64 : out; }
  // The type a row's statistics are kept in: float for 16-bit values (a cast to `out`
  // would round them to 16 bits, which the eager kernels do not).
  static DType compute(DType out) {
    return out == DType::Float16 || out == DType::BFloat16 ? DType::Float32 : out;
  }
  int32_t sum_acc(int32_t x, DType out) {
    const DType acc = acc_type(out);
    return node(KOp::ReduceSum, acc, cast(x, acc));
  }
  int32_t mean_acc(int32_t x, DType out) {
    const DType acc = acc_type(out);
    return math(OpId::Div, acc, sum_acc(x, out), cast(node(KOp::ReduceCount, DType::Float64), acc));
  }
  // Sum of squared deviations from the mean, accumulated like mean_acc.
  int32_t squared_deviations(int32_t x, int32_t mean, DType out) {
    const DType acc = acc_type(out);
    const int32_t d = math(OpId::Sub, acc, cast(x, acc), mean);
    return sum_acc(math(OpId::Mul, acc, d, d), out);
  }

  // exp(d) for a row's d = x - max (<= 0, or NaN). Where x may hold -inf (it comes from a
  // where or an addition in this kernel: masked_fill, an additive mask), lanes with d
  // below the last power of e a float holds as a normal number (-87; double: -708) give
  // 0: libmvec's vector exp, which the loop vectorizer calls, computes such lanes (-inf:
  // a masked softmax's dropped keys) one at a time through a scalar call (a causal
  // softmax over [8, 4, 64, 64] took 0.78 ms fused against 0.37 eager; guarded 0.20).
  // Their exact values are below 1.2e-38 (2.3e-308), which no sum of a row with its max
  // at exp(0) = 1 can see. Other rows skip the guard: it costs a quarter of an unmasked
  // softmax's time.
  int32_t exp_of_shifted(int32_t d, DType out, bool may_hold_infinities) {
    if (!may_hold_infinities) return math(OpId::Exp, out, d);
    const double floor = compute(out) == DType::Float64 ? -708.0 : -87.0;
    const int32_t lowest = constant(floor, out);
    const int32_t e = math(OpId::Exp, out, math(OpId::Maximum, out, d, lowest));  // NaN stays
    return node(KOp::Where, out, math(OpId::Lt, DType::Bool, d, lowest), constant(0, out), e);
  }

  // Whether a row's input is made in this kernel by a where or an addition (through
  // casts): the ways a mask's -inf enters a softmax.
  bool maybe_masked(int32_t x) const {
    const std::vector<KNode>& nodes = out_.kernel.nodes;
    while (nodes[x].op == KOp::Cast) x = nodes[x].in[0];
    const KNode& n = nodes[x];
    return n.op == KOp::Where || (n.op == KOp::Binary && n.fn == OpId::Add);
  }

  int32_t lower_row_op(int i, const TraceOp& op, DType out) {
    const int32_t x = cast(input(op.inputs[0], g_.shape), out);
    switch (op.op) {
      case OpId::Sum:
        return cast(sum_acc(x, out), out);
      case OpId::Mean:
        return cast(mean_acc(x, out), out);
      case OpId::Max:
        return node(KOp::ReduceMax, out, x);
      case OpId::Min:
        return node(KOp::ReduceMin, out, x);
      case OpId::Var: {
        const DType acc = acc_type(out);
        const int32_t ss = squared_deviations(x, mean_acc(x, out), out);
        const int32_t dof =
            math(OpId::Maximum, DType::Float64,
                 math(OpId::Sub, DType::Float64, node(KOp::ReduceCount, DType::Float64),
                      constant(static_cast<double>(op.attrs.correction), DType::Float64)),
                 constant(0, DType::Float64));
        return cast(math(OpId::Div, acc, ss, cast(dof, acc)), out);
      }
      case OpId::LogSumExp: {
        // As PyTorch: log(sum(exp(x - m))) + m with m = max(x), or 0 when that is infinite.
        const int32_t max = node(KOp::ReduceMax, out, x);
        const int32_t infinite =
            math(OpId::Eq, DType::Bool, math(OpId::Abs, out, max), constant(INFINITY, out));
        const int32_t shift = node(KOp::Where, out, infinite, constant(0, out), max);
        const int32_t s =
            sum_acc(exp_of_shifted(math(OpId::Sub, out, x, shift), out, maybe_masked(x)), out);
        const DType acc = acc_type(out);
        return cast(math(OpId::Add, acc, math(OpId::Log, acc, s), cast(shift, acc)), out);
      }
      case OpId::Softmax:
      case OpId::LogSoftmax: {
        const int32_t max = node(KOp::ReduceMax, out, x);
        const int32_t shifted = math(OpId::Sub, out, x, max);
        const int32_t e = exp_of_shifted(shifted, out, maybe_masked(x));
        const int32_t s = sum_acc(e, out);
        const DType acc = acc_type(out);
        if (op.op == OpId::Softmax)
          return math(OpId::Mul, out, e,
                      cast(math(OpId::Div, acc, constant(1, acc), s), compute(out)));
        return math(OpId::Sub, out, x,
                    math(OpId::Add, out, max, cast(math(OpId::Log, acc, s), compute(out))));
      }
      case OpId::LayerNorm: {
        // As ops/cpu/layer_norm.cpp: mean and variance in double, then
        // (x - mean) * (1 / sqrt(var + eps)) in the compute type.
        const DType acc = acc_type(out);
        const int32_t mean = mean_acc(x, out);
        const int32_t var = math(OpId::Div, acc, squared_deviations(x, mean, out),
                                 cast(node(KOp::ReduceCount, DType::Float64), acc));
        const int32_t r =
            cast(math(OpId::Rsqrt, acc, math(OpId::Add, acc, var, cast(scalar(i, 0), acc))),
                 compute(out));
        int32_t y = math(OpId::Mul, out, math(OpId::Sub, out, x, cast(mean, compute(out))), r);
        if (op.inputs.size() > 1)
          y = math(OpId::Mul, out, y, cast(input(op.inputs[1], g_.shape), out));
        if (op.inputs.size() > 2)
          y = math(OpId::Add, out, y, cast(input(op.inputs[2], g_.shape), out));
        return y;
      }
      default:
        throw Unsupported(std::string("no lowering for ") + op_name(op.op));
    }
  }

  // rand / randn: the eager kernels' draw (ops/philox.h) at the element's row-major index
  // in the op's output, which is the offset of an index-only operand with the output's
  // contiguous strides; broadcast dims of the group add nothing to it.
  int32_t random(int i, const TraceOp& op) {
    const InputRef self{InputRef::Kind::Value, i};
    const int32_t operand = operand_for(self, op.meta.sizes, true);
    KOperand& o = out_.kernel.operands[operand];
    if (!o.stored) o.index_only = true;
    KNode n;
    n.op = KOp::Random;
    n.fn = op.op;
    n.dtype = DType::Float64;
    n.in[0] = scalar(i, 0);
    n.in[1] = scalar(i, 1);
    n.operand = operand;
    n.value = uniform_bits(op.meta.dtype);
    return out_.kernel.add(n);
  }
  // The precision rand draws at for a dtype, as philox::uniform_bits<T>().
  static int uniform_bits(DType d) {
    switch (d) {
      case DType::Float64:
        return 53;
      case DType::Float32:
        return 24;
      case DType::BFloat16:
        return 8;
      case DType::Float16:
        return 11;
      default:
        throw Unsupported(std::string("rand of ") + dtype_name(d));
    }
  }

  // ---- dims: drop size-1 dims, merge dims every operand walks contiguously.
  void collapse() {
    const int cols_from = rank_ - g_.reduced_dims;
    std::vector<std::pair<int64_t, std::vector<int64_t>>> outer, cols;
    for (int d = 0; d < rank_; ++d) {
      if (g_.shape[d] == 1) continue;
      std::vector<int64_t> st;
      for (const OperandBinding& o : out_.operands) st.push_back(o.strides[d]);
      auto& part = (g_.reduced_dims > 0 && d >= cols_from) ? cols : outer;
      if (!part.empty()) {
        auto& last = part.back();
        bool merge = true;
        for (size_t k = 0; k < st.size() && merge; ++k)
          merge = last.second[k] == st[k] * g_.shape[d];
        if (merge) {
          last.first *= g_.shape[d];
          last.second = st;
          continue;
        }
      }
      part.push_back({g_.shape[d], st});
    }
    const size_t nops = out_.operands.size();
    if (g_.reduced_dims > 0) {
      if (cols.size() > 1)
        throw Unsupported("the reduced dims are not contiguous in every operand");
      if (cols.empty()) cols.push_back({1, std::vector<int64_t>(nops, 0)});
    } else if (outer.empty()) {
      outer.push_back({1, std::vector<int64_t>(nops, 0)});
    }
    std::vector<std::pair<int64_t, std::vector<int64_t>>> dims = outer;
    dims.insert(dims.end(), cols.begin(), cols.end());
    out_.shape.clear();
    for (auto& d : dims) out_.shape.push_back(d.first);
    for (size_t k = 0; k < nops; ++k) {
      Dims s;
      for (auto& d : dims) s.push_back(d.second[k]);
      out_.operands[k].strides = s;
      const int64_t inner = s.back();
      KOperand& ko = out_.kernel.operands[k];
      ko.inner = inner == 1   ? InnerStride::Contiguous
                 : inner == 0 ? InnerStride::Broadcast
                              : InnerStride::Strided;
      ko.row_level = g_.reduced_dims > 0 && inner == 0;
      if (ko.stored && ko.inner == InnerStride::Broadcast && g_.reduced_dims == 0 &&
          out_.shape.back() > 1)
        throw Unsupported("an output broadcast along the inner dim");
    }
    out_.kernel.rank = static_cast<int>(out_.shape.size());
    out_.cols = out_.shape.back();
    int64_t total = 1;
    for (int64_t s : out_.shape) total *= s;
    // A row kernel's work is its rows: the product of the outer dims. Rows of zero
    // columns still exist and write their row-level outputs (an empty sum is 0).
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < out_.shape.size(); ++d) rows *= out_.shape[d];
    out_.work = g_.reduced_dims > 0 ? rows : total;
  }

  void assign_levels() {
    Kernel& k = out_.kernel;
    std::vector<int> ready(k.nodes.size(), 0);
    for (size_t i = 0; i < k.nodes.size(); ++i) {
      KNode& n = k.nodes[i];
      if (n.op == KOp::Load || n.op == KOp::Random) {
        n.level = k.kind == Kernel::Kind::Pointwise || !k.operands[n.operand].row_level
                      ? Level::Full
                      : Level::Row;
      } else if (n.op == KOp::Const || n.op == KOp::Scalar || n.op == KOp::ReduceCount) {
        n.level = Level::Invariant;
      } else if (is_reduction(n.op)) {
        n.level = Level::Row;
        n.stage = ready[n.in[0]] + 1;
        ready[i] = n.stage;
        continue;
      } else {
        n.level = Level::Invariant;
        for (int32_t a : n.in) {
          if (a < 0) continue;
          n.level = std::max(n.level, k.nodes[a].level);
          ready[i] = std::max(ready[i], ready[a]);
        }
      }
      for (int32_t a : n.in)
        if (a >= 0) ready[i] = std::max(ready[i], ready[a]);
    }
    if (k.kind == Kernel::Kind::Row) {
      // A row-level store of a full-level value cannot happen; check it stays so.
      for (const KStore& s : k.stores)
        if (k.operands[s.operand].row_level && k.nodes[s.node].level == Level::Full)
          throw Unsupported("a per-element value stored to a per-row output");
    }
  }

  const TraceProgram& p_;
  const FusionPlan& plan_;
  const FusionGroup& g_;
  std::vector<int> base_;
  int rank_ = 0;
  Dims row_keep_, row_drop_;
  LoweredKernel out_;
  std::map<int, int32_t> values_;
};

}  // namespace

LoweredKernel lower_group(const TraceProgram& program, const FusionPlan& plan,
                          const FusionGroup& group, bool simplify_ir) {
  return Lowerer(program, plan, group).run(simplify_ir);
}

bool can_lower(const TraceProgram& program, int i, DeviceType target) {
  const TraceOp& op = program.ops[i];
  if (op.meta.device.type != target) return false;
  if (op.op == OpId::Pow && !is_floating(op.meta.dtype)) return false;
  if (op_info(op.op).family == OpFamily::Random && !is_floating(op.meta.dtype)) return false;
  return true;
}

FusionOptions fusable_except(DeviceType target, const std::set<int>& banned) {
  FusionOptions options;
  options.can_fuse = [target, &banned](const TraceProgram& p, int i) {
    return !banned.count(i) && can_lower(p, i, target);
  };
  return options;
}

std::string eager_fallback_note(size_t step, const std::exception& why) {
  tracer::log_line(tracer::kLogTrace,
                   std::string("fused kernel fell back to eager kernels: ") + why.what());
  return "step " + std::to_string(step) + " fell back to eager kernels: " + why.what();
}

}  // namespace kiln::jit
