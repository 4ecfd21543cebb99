#include "jit/kernel_ir.h"

#include <cmath>
#include <cstdio>

namespace kiln::jit {

const char* kop_name(KOp op) {
  static const char* const names[] = {
      "load", "scalar",     "const",      "reduce_count", "neg",       "abs",     "exp",  "log",
      "sqrt", "rsqrt",      "sin",        "cos",          "tanh",      "sigmoid", "relu", "gelu",
      "silu", "reciprocal", "erf",        "cast",         "add",       "sub",     "mul",  "div",
      "pow",  "max",        "min",        "eq",           "ne",        "lt",      "le",   "gt",
      "ge",   "where",      "reduce_sum", "reduce_max",   "reduce_min"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(KOp::ReduceMin) + 1);
  return names[static_cast<int>(op)];
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
         (o.row_level ? " row" : "") + "\n";
  }
  char buf[64];
  for (size_t i = 0; i < nodes.size(); ++i) {
    const KNode& n = nodes[i];
    t += "  %" + std::to_string(i) + " = " + kop_name(n.op) + "." + dtype_name(n.dtype) + "." +
         levels[static_cast<int>(n.level)];
    if (n.stage) t += ".s" + std::to_string(n.stage);
    for (int32_t a : n.in)
      if (a >= 0) t += " %" + std::to_string(a);
    if (n.op == KOp::Load) t += " op" + std::to_string(n.operand);
    if (n.op == KOp::Scalar) t += " s" + std::to_string(n.slot);
    if (n.op == KOp::Const) {
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

// Folds an op over constant inputs; false when it does not fold exactly.
bool fold(const KNode& n, const double* x, double* out) {
  if (!is_floating(n.dtype) && n.op != KOp::Cast) return false;
  switch (n.op) {
    case KOp::Neg:
      *out = -x[0];
      break;
    case KOp::Abs:
      *out = std::fabs(x[0]);
      break;
    case KOp::Exp:
      *out = std::exp(x[0]);
      break;
    case KOp::Log:
      *out = std::log(x[0]);
      break;
    case KOp::Sqrt:
      *out = std::sqrt(x[0]);
      break;
    case KOp::Rsqrt:
      *out = 1 / std::sqrt(x[0]);
      break;
    case KOp::Tanh:
      *out = std::tanh(x[0]);
      break;
    case KOp::Reciprocal:
      *out = 1 / x[0];
      break;
    case KOp::Cast:
      *out = x[0];
      break;
    case KOp::Add:
      *out = x[0] + x[1];
      break;
    case KOp::Sub:
      *out = x[0] - x[1];
      break;
    case KOp::Mul:
      *out = x[0] * x[1];
      break;
    case KOp::Div:
      *out = x[0] / x[1];
      break;
    default:
      return false;
  }
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
        n.op == KOp::ReduceCount || is_reduction(n.op))
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
    switch (n.op) {
      case KOp::Mul:
        if (is_const(k, n.in[1], 1) && same_type(n.in[0]))
          keep = n.in[0];
        else if (is_const(k, n.in[0], 1) && same_type(n.in[1]))
          keep = n.in[1];
        break;
      case KOp::Add:
        if (is_const(k, n.in[1], 0) && same_type(n.in[0]))
          keep = n.in[0];
        else if (is_const(k, n.in[0], 0) && same_type(n.in[1]))
          keep = n.in[1];
        break;
      case KOp::Sub:
        if (is_const(k, n.in[1], 0) && same_type(n.in[0])) keep = n.in[0];
        break;
      case KOp::Div:
        if (is_const(k, n.in[1], 1) && same_type(n.in[0])) keep = n.in[0];
        break;
      case KOp::Neg:
        if (k.nodes[n.in[0]].op == KOp::Neg) keep = k.nodes[n.in[0]].in[0];
        break;
      case KOp::Cast:
        if (same_type(n.in[0])) keep = n.in[0];
        break;
      default:
        break;
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
