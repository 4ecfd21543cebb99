#include "jit/kernel_ir.h"

#include <cmath>
#include <cstdio>

#include "ops/pointwise_math.h"
#include "ops/registry.h"

namespace kiln::jit {

const char* kop_name(KOp op) {
  static const char* const names[] = {"load",   "scalar",     "const",      "reduce_count",
                                      "cast",   "unary",      "binary",     "where",
                                      "random", "reduce_sum", "reduce_max", "reduce_min"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(KOp::ReduceMin) + 1);
  return names[static_cast<int>(op)];
}

KNode math_node(OpId fn, DType dtype, int32_t a, int32_t b, bool approximate) {
  KNode n;
  n.op = b < 0 ? KOp::Unary : KOp::Binary;
  n.fn = fn;
  n.approximate = approximate;
  n.dtype = dtype;
  n.in[0] = a;
  n.in[1] = b;
  return n;
}

std::string node_name(const KNode& n) {
  if (n.op == KOp::Random) return n.fn == OpId::Randn ? "randn" : "rand";
  if (n.op != KOp::Unary && n.op != KOp::Binary) return kop_name(n.op);
  return std::string(op_name(n.fn)) + (n.approximate ? "_tanh" : "");
}

bool is_reduction(KOp op) { return op >= KOp::ReduceSum; }

int Kernel::stages() const {
  int s = 0;
  for (const KNode& n : nodes) s = std::max(s, n.stage);
  return s;
}

std::string Kernel::text() const {
  static const char* const levels[] = {"inv", "row", "full"};
  static const char* const inner[] = {"contig", "bcast", "strided"};
  std::string t = kind == Kind::Pointwise ? "pointwise" : "row";
  t += " rank=" + std::to_string(rank) + " scalars=";
  for (uint8_t f : scalar_is_float) t += f ? 'f' : 'i';
  t += "\n";
  for (size_t i = 0; i < operands.size(); ++i) {
    const KOperand& o = operands[i];
    t += "  operand " + std::to_string(i) + ": " + dtype_name(o.dtype) + " " +
         inner[static_cast<int>(o.inner)] + (o.loaded ? " in" : "") + (o.stored ? " out" : "") +
         (o.row_level ? " row" : "") + (o.index_only ? " index" : "") + "\n";
  }
  char buf[64];
  for (size_t i = 0; i < nodes.size(); ++i) {
    const KNode& n = nodes[i];
    t += "  %" + std::to_string(i) + " = " + node_name(n) + "." + dtype_name(n.dtype) + "." +
         levels[static_cast<int>(n.level)];
    if (n.stage) t += ".s" + std::to_string(n.stage);
    for (int32_t a : n.in)
      if (a >= 0) t += " %" + std::to_string(a);
    if (n.op == KOp::Load || n.op == KOp::Random) t += " op" + std::to_string(n.operand);
    if (n.op == KOp::Scalar) t += " s" + std::to_string(n.slot);
    if (n.op == KOp::Const || n.op == KOp::Random) {
      std::snprintf(buf, sizeof(buf), " %.17g", n.value);
      t += buf;
    }
    t += "\n";
  }
  for (const KStore& s : stores)
    t += "  store %" + std::to_string(s.node) + " -> op" + std::to_string(s.operand) + "\n";
  return t;
}

uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t Kernel::hash() const { return fnv1a(text()); }

namespace {

bool is_const(const Kernel& k, int32_t i, double v) {
  return i >= 0 && k.nodes[i].op == KOp::Const && k.nodes[i].value == v;
}

double round_to(DType d, double v) {
  switch (d) {
    case DType::Float32:
      return static_cast<float>(v);
    case DType::Float16:
      return static_cast<float>(Half(static_cast<float>(v)));
    case DType::BFloat16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    case DType::Float64:
      return v;
    case DType::Int32:
      return static_cast<double>(static_cast<int32_t>(v));
    case DType::Int64:
      return static_cast<double>(static_cast<int64_t>(v));
    case DType::Bool:
      return v != 0;
  }
  return v;
}

bool is_math(const KNode& n, OpId fn) {
  return (n.op == KOp::Unary || n.op == KOp::Binary) && n.fn == fn;
}

// The ops whose float64 result, rounded to the node's type, is what the kernel computes
// (to the ulp the tests allow): folded with the ops' own functors.
bool foldable(OpId fn) {
  switch (fn) {
    case OpId::Neg:
    case OpId::Abs:
    case OpId::Exp:
    case OpId::Log:
    case OpId::Sqrt:
    case OpId::Rsqrt:
    case OpId::Tanh:
    case OpId::Reciprocal:
    case OpId::Add:
    case OpId::Sub:
    case OpId::Mul:
    case OpId::Div:
      return true;
    default:
      return false;
  }
}

// Folds a node over constant inputs; false when it does not fold exactly.
bool fold(const KNode& n, const double* x, double* out) {
  if (n.op == KOp::Cast) {
    *out = round_to(n.dtype, x[0]);
    return true;
  }
  if (!is_floating(n.dtype) || n.approximate || !foldable(n.fn)) return false;
  bool folded = false;
  if (n.op == KOp::Unary)
    folded =
        pm::visit_unary_op(n.fn, [&](auto op) { *out = pm::UnaryFn<decltype(op)::value>{}(x[0]); });
  else if (n.op == KOp::Binary)
    folded = pm::visit_binary_op(n.fn, [&](auto op) {
      *out = static_cast<double>(pm::BinaryFn<decltype(op)::value>{}(x[0], x[1]));
    });
  if (!folded) return false;
  *out = round_to(n.dtype, *out);
  return true;
}

}  // namespace

int simplify(Kernel& k) {
  const size_t count = k.nodes.size();
  std::vector<int32_t> repl(count);
  for (size_t i = 0; i < count; ++i) {
    KNode& n = k.nodes[i];
    repl[i] = static_cast<int32_t>(i);
    for (int32_t& a : n.in)
      if (a >= 0) a = repl[a];
    if (n.op == KOp::Load || n.op == KOp::Scalar || n.op == KOp::Const ||
        n.op == KOp::ReduceCount || n.op == KOp::Random || is_reduction(n.op))
      continue;
    // Constant folding.
    bool all_const = true;
    double x[3] = {0, 0, 0};
    for (int j = 0; j < 3; ++j) {
      if (n.in[j] < 0) continue;
      if (k.nodes[n.in[j]].op != KOp::Const)
        all_const = false;
      else
        x[j] = k.nodes[n.in[j]].value;
    }
    double v;
    if (all_const && fold(n, x, &v)) {
      n.op = KOp::Const;
      n.value = v;
      n.level = Level::Invariant;
      n.in[0] = n.in[1] = n.in[2] = -1;
      continue;
    }
    // Exact identities, only where the surviving input already has the result's type.
    auto same_type = [&](int32_t a) { return k.nodes[a].dtype == n.dtype; };
    int32_t keep = -1;
    if (n.op == KOp::Cast) {
      if (same_type(n.in[0])) keep = n.in[0];
    } else if (is_math(n, OpId::Mul)) {
      if (is_const(k, n.in[1], 1) && same_type(n.in[0]))
        keep = n.in[0];
      else if (is_const(k, n.in[0], 1) && same_type(n.in[1]))
        keep = n.in[1];
    } else if (is_math(n, OpId::Add)) {
      if (is_const(k, n.in[1], 0) && same_type(n.in[0]))
        keep = n.in[0];
      else if (is_const(k, n.in[0], 0) && same_type(n.in[1]))
        keep = n.in[1];
    } else if (is_math(n, OpId::Sub) || is_math(n, OpId::Div)) {
      const double unit = n.fn == OpId::Sub ? 0 : 1;
      if (is_const(k, n.in[1], unit) && same_type(n.in[0])) keep = n.in[0];
    } else if (is_math(n, OpId::Neg)) {
      if (is_math(k.nodes[n.in[0]], OpId::Neg)) keep = k.nodes[n.in[0]].in[0];
    }
    if (keep >= 0) repl[i] = keep;
  }
  for (KStore& s : k.stores) s.node = repl[s.node];

  // Dead-node removal: keep what the stores need.
  std::vector<uint8_t> live(count, 0);
  for (const KStore& s : k.stores) live[s.node] = 1;
  for (size_t i = count; i-- > 0;) {
    if (!live[i]) continue;
    for (int32_t a : k.nodes[i].in)
      if (a >= 0) live[a] = 1;
  }
  std::vector<int32_t> index(count, -1);
  std::vector<KNode> kept;
  for (size_t i = 0; i < count; ++i) {
    if (!live[i]) continue;
    KNode n = k.nodes[i];
    for (int32_t& a : n.in)
      if (a >= 0) a = index[a];
    index[i] = static_cast<int32_t>(kept.size());
    kept.push_back(n);
  }
  for (KStore& s : k.stores) s.node = index[s.node];
  const int removed = static_cast<int>(count - kept.size());
  k.nodes = std::move(kept);
  for (KOperand& o : k.operands) o.loaded = false;
  for (const KNode& n : k.nodes)
    if (n.op == KOp::Load) k.operands[n.operand].loaded = true;
  return removed;
}

std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 15];
  return s;
}

}  // namespace kiln::jit
