// The CUDA code generator (jit/cuda/cuda_codegen): kernels covering every KernelIR op,
// dtype, stride class and kernel kind are emitted and compiled by NVRTC for sm_90. This
// needs no GPU (NVRTC is a compiler library), so CI checks the generated code compiles;
// the results are checked on the GPU machine by test_jit_cuda.cpp.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA
#include "jit/cuda/cuda_codegen.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "ops/pointwise_math.h"
#include "ops/registry.h"

namespace {

using kiln::DType;
using namespace kiln::jit;

struct Builder {
  Kernel k;
  int32_t node(KOp op, DType d, int32_t a = -1, int32_t b = -1, int32_t c = -1,
               Level level = Level::Full) {
    KNode n;
    n.op = op;
    n.dtype = d;
    n.level = level;
    n.in[0] = a;
    n.in[1] = b;
    n.in[2] = c;
    return k.add(n);
  }
  int32_t operand(DType d, InnerStride inner, bool stored, bool row_level = false) {
    KOperand o;
    o.dtype = d;
    o.inner = inner;
    o.loaded = !stored;
    o.stored = stored;
    o.row_level = row_level;
    k.operands.push_back(o);
    return static_cast<int32_t>(k.operands.size()) - 1;
  }
  int32_t load(int32_t operand, DType compute, Level level = Level::Full) {
    KNode n;
    n.op = KOp::Load;
    n.dtype = compute;
    n.operand = operand;
    n.level = level;
    return k.add(n);
  }
  // rand (bits > 0) or randn (bits == 0) at the element index of a new index-only operand.
  int32_t random(InnerStride inner, int bits, int32_t seed, int32_t offset,
                 Level level = Level::Full) {
    KOperand o;
    o.dtype = DType::Float32;
    o.inner = inner;
    o.index_only = true;
    k.operands.push_back(o);
    KNode n;
    n.op = KOp::Random;
    n.fn = bits > 0 ? kiln::OpId::Rand : kiln::OpId::Randn;
    n.value = bits;
    n.dtype = DType::Float64;
    n.level = level;
    n.in[0] = seed;
    n.in[1] = offset;
    n.operand = static_cast<int32_t>(k.operands.size()) - 1;
    return k.add(n);
  }
  int32_t scalar(int slot, DType d) {
    KNode n;
    n.op = KOp::Scalar;
    n.dtype = d;
    n.slot = slot;
    n.level = Level::Invariant;
    return k.add(n);
  }
  int32_t math(kiln::OpId fn, DType d, int32_t a, int32_t b = -1, Level level = Level::Full) {
    KNode n = math_node(fn, d, a, b);
    n.level = level;
    return k.add(n);
  }
  void store(int32_t node, int32_t operand) { k.stores.push_back({node, operand}); }
};

// Every op of ops/ops.def with a functor in ops/pointwise_math.h.
std::vector<kiln::OpId> ops_with_functor(bool binary) {
  std::vector<kiln::OpId> ops;
  for (int i = 0; i < kiln::kNumOps; ++i) {
    const auto op = static_cast<kiln::OpId>(i);
    if (binary ? kiln::pm::visit_binary_op(op, [](auto) {})
               : kiln::pm::visit_unary_op(op, [](auto) {}))
      ops.push_back(op);
  }
  return ops;
}

// Every unary and binary op on one float type, pointwise over `rank` dims.
Kernel every_op(DType storage, InnerStride inner, int rank) {
  Builder b;
  b.k.rank = rank;
  b.k.scalar_is_float = {1, 0};
  const DType f = storage == DType::Float64 ? DType::Float64 : DType::Float32;
  const int32_t x = b.load(b.operand(storage, inner, false), f);
  const int32_t y = b.load(b.operand(storage, InnerStride::Broadcast, false), f);
  const int32_t s = b.node(KOp::Cast, f, b.scalar(0, DType::Float64), -1, -1, Level::Invariant);
  using kiln::OpId;
  int32_t acc = b.math(OpId::Add, f, x, s);
  for (OpId op : ops_with_functor(false)) acc = b.math(OpId::Add, f, acc, b.math(op, f, x));
  KNode gelu_tanh = math_node(OpId::Gelu, f, x, -1, true);
  acc = b.math(OpId::Add, f, acc, b.k.add(gelu_tanh));
  for (OpId op : ops_with_functor(true)) {
    const bool compare = kiln::op_info(op).dtype_rule == kiln::DTypeRule::Bool;
    const int32_t v = b.math(op, compare ? DType::Bool : f, x, y);
    acc = b.math(OpId::Add, f, acc, compare ? b.node(KOp::Cast, f, v) : v);
  }
  const int32_t seed = b.scalar(1, DType::Int64);
  for (int bits : {24, 0}) {
    const int32_t r = b.node(KOp::Cast, f, b.random(inner, bits, seed, seed));
    acc = b.math(OpId::Add, f, acc, r);
  }
  const int32_t gt = b.math(OpId::Gt, DType::Bool, x, y);
  acc = b.node(KOp::Where, f, gt, acc, y);
  const int32_t n = b.node(KOp::Cast, DType::Int64, acc);
  const int32_t i = b.math(OpId::Add, DType::Int64, n, b.scalar(1, DType::Int64));
  b.store(acc, b.operand(storage, InnerStride::Contiguous, true));
  b.store(b.math(OpId::Ne, DType::Bool, i, b.node(KOp::Cast, DType::Int64, y)),
          b.operand(DType::Bool, inner, true));
  b.store(b.math(OpId::Maximum, DType::Int64, i, n), b.operand(DType::Int64, inner, true));
  int32_t i32 = b.node(KOp::Cast, DType::Int32, n);
  for (OpId op : {OpId::Neg, OpId::Abs, OpId::Relu}) i32 = b.math(op, DType::Int32, i32);
  b.store(i32, b.operand(DType::Int32, inner, true));
  return b.k;
}

// softmax-like row kernel with two stages, a row-level output and a strided operand.
Kernel row_kernel(DType storage) {
  Builder b;
  b.k.kind = Kernel::Kind::Row;
  b.k.rank = 2;
  const DType f = storage == DType::Float64 ? DType::Float64 : DType::Float32;
  const int32_t x = b.load(b.operand(storage, InnerStride::Strided, false), f);
  const int32_t mx = b.node(KOp::ReduceMax, f, x, -1, -1, Level::Row);
  b.k.nodes[mx].stage = 1;
  const int32_t e = b.math(kiln::OpId::Exp, f, b.math(kiln::OpId::Sub, f, x, mx));
  const int32_t sum = b.node(KOp::ReduceSum, DType::Float64, b.node(KOp::Cast, DType::Float64, e),
                             -1, -1, Level::Row);
  b.k.nodes[sum].stage = 2;
  const int32_t mean =
      b.math(kiln::OpId::Div, DType::Float64, sum,
             b.node(KOp::ReduceCount, DType::Float64, -1, -1, -1, Level::Row), Level::Row);
  const int32_t inv = b.node(KOp::Cast, f, mean, -1, -1, Level::Row);
  b.k.scalar_is_float = {0};
  const int32_t seed = b.scalar(0, DType::Int64);
  const int32_t keep =
      b.math(kiln::OpId::Ge, DType::Bool, b.random(InnerStride::Contiguous, 24, seed, seed),
             b.node(KOp::Const, DType::Float64, -1, -1, -1, Level::Invariant));
  const int32_t row_draw = b.random(InnerStride::Broadcast, 53, seed, seed, Level::Row);
  const int32_t y = b.node(KOp::Where, f, keep, b.math(kiln::OpId::Mul, f, e, inv),
                           b.node(KOp::Cast, f, row_draw));
  b.store(y, b.operand(storage, InnerStride::Contiguous, true));
  b.store(inv, b.operand(storage, InnerStride::Contiguous, true, true));
  const int32_t imin =
      b.node(KOp::ReduceMin, DType::Int64, b.node(KOp::Cast, DType::Int64, x), -1, -1, Level::Row);
  b.k.nodes[imin].stage = 1;
  b.store(imin, b.operand(DType::Int64, InnerStride::Contiguous, true, true));
  return b.k;
}

TEST(CudaCodegen, EveryOpDtypeAndKernelKindCompilesWithNvrtc) {
  std::string source = cuda_backend::cuda_prelude();
  int n = 0;
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (InnerStride inner : {InnerStride::Contiguous, InnerStride::Strided})
      for (int rank : {1, 3})
        source +=
            cuda_backend::emit_cuda_kernel(every_op(d, inner, rank), "k" + std::to_string(n++));
    source += cuda_backend::emit_cuda_kernel(row_kernel(d), "k" + std::to_string(n++));
  }
  std::string cubin;
  try {
    cubin = cuda_backend::compile_cubin(source, "sm_90");
  } catch (const std::exception& e) {
    FAIL() << e.what() << "\n" << source;
  }
  EXPECT_GT(cubin.size(), 1000u);
}

TEST(CudaCodegen, ArgumentLayoutIsOneWordPerPointerSizeStrideScalarAndTheWork) {
  const Kernel k = every_op(DType::Float32, InnerStride::Strided, 3);
  const cuda_backend::ArgsLayout l = cuda_backend::args_layout(k);
  EXPECT_EQ(l.operands, 8);  // 6 tensors and the 2 index-only operands of rand and randn
  EXPECT_EQ(l.words(), 8 + 3 + 8 * 3 + 2 + 1);
  EXPECT_NE(
      cuda_backend::emit_cuda_kernel(k, "f").find("KilnArgs<" + std::to_string(l.words()) + ">"),
      std::string::npos);
}

}  // namespace
#else
TEST(CudaCodegen, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif
