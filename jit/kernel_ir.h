// KernelIR: one fused kernel as an expression DAG, the form both code generators read
// (jit/llvm today, jit/cuda next). A kernel walks an iteration space of `rank` dims
// (sizes are run-time arguments); its operands are tensors it loads from and stores to,
// each with per-dim element strides (run-time arguments too) and an inner-stride class
// baked into the code (contiguous, broadcast, or strided).
//
//   Pointwise kernel: every node is evaluated per element; the host splits the flattened
//                     space into ranges [begin, end) run in parallel.
//   Row kernel:       the last dim is the reduced one ("cols"); the host splits the rows.
//                     Per row: one pass over the cols per reduction stage, then a final
//                     pass that stores the full-size outputs. Nodes have a level: Invariant
//                     (constants, scalars), Row (one value per row) or Full (per element).
//
// The IR is canonical text (text()), and its hash keys the kernel caches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/op_id.h"
#include "runtime/dtype.h"

namespace kiln::jit {

// Structural node kinds. The math of a pointwise op is not spelled out here: a Unary
// or Binary node names the op (KNode::fn, an ops.def row) and both code generators call
// that op's functor from ops/pointwise_math.h, the one the eager kernels run.
enum class KOp : uint8_t {
  Load,
  Scalar,
  Const,
  ReduceCount,  // number of elements a row reduction covers (a run-time size), float64
  Cast,
  Unary,   // pm::UnaryFn<fn>(in[0]); gelu with `approximate`: pm::GeluTanh
  Binary,  // pm::BinaryFn<fn>(in[0], in[1]), inputs of one compute type; comparisons: Bool
  Where,   // in[0] ? in[1] : in[2]
  // fn Rand: philox::rand_value(in[0], in[1], index, bits = value); fn Randn:
  // philox::randn_value(in[0], in[1], index) (ops/philox.h, what the eager kernels run),
  // a double. in[0], in[1] are the op's seed and offset; index is the element's row-major
  // index in the random op's output: the offset of `operand`, an index-only operand.
  Random,
  // row reductions
  ReduceSum,
  ReduceMax,
  ReduceMin,
};
const char* kop_name(KOp op);
bool is_reduction(KOp op);

enum class Level : uint8_t { Invariant, Row, Full };

struct KNode {
  KOp op = KOp::Const;
  OpId fn = OpId::NumOps;        // Unary, Binary: the op whose functor computes the value
  bool approximate = false;      // Unary gelu: the tanh form
  DType dtype = DType::Float32;  // the value's type (float16/bfloat16 compute in float32)
  Level level = Level::Full;
  int32_t in[3] = {-1, -1, -1};
  int32_t operand = -1;  // Load; Random: its index-only operand
  int32_t slot = -1;     // Scalar: index into the kernel's scalar arguments
  double value = 0;      // Const
  int stage = 0;         // reductions: the pass that computes them (1, 2, ...)
};

// How an operand's innermost dim is addressed (baked into the code).
enum class InnerStride : uint8_t { Contiguous, Broadcast, Strided };

struct KOperand {
  DType dtype = DType::Float32;
  InnerStride inner = InnerStride::Contiguous;
  bool loaded = false;
  bool stored = false;
  bool row_level = false;  // a Row kernel operand that is constant along the cols
  // No tensor: its offset (from the strides, in elements) is a Random node's element
  // index. Unless it is also stored, the host passes no pointer for it.
  bool index_only = false;
};

struct KStore {
  int32_t node = -1;
  int32_t operand = -1;
};

struct Kernel {
  enum class Kind : uint8_t { Pointwise, Row };
  Kind kind = Kind::Pointwise;
  int rank = 1;
  std::vector<KNode> nodes;
  std::vector<KOperand> operands;
  std::vector<KStore> stores;
  std::vector<uint8_t> scalar_is_float;  // per scalar slot: a double (1) or an int64 (0)

  int32_t add(const KNode& n) {
    nodes.push_back(n);
    return static_cast<int32_t>(nodes.size()) - 1;
  }
  int stages() const;  // number of reduction passes
  std::string text() const;
  uint64_t hash() const;  // of text()
};

// A Unary or Binary node of op `fn` (gelu's tanh form when `approximate`).
KNode math_node(OpId fn, DType dtype, int32_t a, int32_t b = -1, bool approximate = false);
// The name of a node's computation in text(): "load", "exp", "gelu_tanh", ...
std::string node_name(const KNode& n);

// Constant folding and exact algebraic simplification (x*1, x+0, x-0, x/1, -(-x), casts
// to the same type), then dead-node removal. Returns the number of nodes removed.
int simplify(Kernel& kernel);

uint64_t fnv1a(const std::string& text, uint64_t seed = 1469598103934665603ull);
std::string hex64(uint64_t v);  // 16 lowercase hex digits (cache keys)

}  // namespace kiln::jit
