// The CUDA code generator (jit/cuda/cuda_codegen): kernels covering every KernelIR op,
// dtype, stride class and kernel kind are emitted and compiled by NVRTC for sm_90. This
// needs no GPU (NVRTC is a compiler library), so CI checks the generated code compiles;
// the results are checked on the GPU machine by test_jit_cuda.cpp.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA
#include "jit/cuda/cuda_codegen.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/cuda/nvrtc_programs.h"
#include "ops/pointwise_math.h"
#include "ops/registry.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>

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

// The CUBIN of a program for sm_90; on an NVRTC error a test failure with its log and
// the source, and an empty string.
std::string compile_or_report(const std::string& source) {
  try {
    return cuda_backend::compile_cubin(source, "sm_90");
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << source;
    return "";
  }
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
  EXPECT_GT(compile_or_report(source).size(), 1000u);
}

// A row kernel emitted for its row length holds only the path the launch takes for it
// (cuda_backend.cpp choose_launch: warp rows up to warp_row_limit, else one block of up
// to 256 threads per row, cached up to 8 elements a thread): smaller and faster to
// compile; each length class its own text, so its own name; and every one compiles.
TEST(CudaCodegen, RowKernelsForAKnownRowLengthHoldOnlyTheirPath) {
  const Kernel k = row_kernel(DType::BFloat16);
  const int64_t warp_limit = cuda_backend::warp_row_limit(k);
  const std::string generic = cuda_backend::emit_cuda_kernel(k, "kiln_k");
  EXPECT_NE(generic.find("if (blockDim.y > 1)"), std::string::npos);
  EXPECT_NE(generic.find("LL * blockDim.x) {"), std::string::npos);
  std::string source = cuda_backend::cuda_prelude();
  std::set<std::string> names;
  for (int64_t cols : {int64_t{1}, int64_t{65}, int64_t{256}, warp_limit, warp_limit + 1,
                       int64_t{2048}, int64_t{2049}, int64_t{50257}}) {
    const std::string text = cuda_backend::emit_cuda_kernel(k, "kiln_k", cols);
    EXPECT_EQ(text.find("if (blockDim.y > 1)"), std::string::npos) << cols;
    EXPECT_EQ(text.find("LL * blockDim.x) {"), std::string::npos) << cols;
    EXPECT_LT(text.size(), generic.size()) << cols;
    const bool warp = cols <= warp_limit;
    EXPECT_EQ(text.find("blockDim.y") != std::string::npos, warp) << cols;
    if (warp) {  // slots for the row, a power of two
      int slots = 1;
      while (32LL * slots < cols) slots *= 2;
      EXPECT_NE(text.find("u < " + std::to_string(slots) + ";"), std::string::npos) << cols;
    } else {  // cached (u over the block) or streamed (j strides the row)
      EXPECT_EQ(text.find("u) * blockDim.x") != std::string::npos, cols <= 2048) << cols;
      EXPECT_EQ(text.find("j += blockDim.x") != std::string::npos, cols > 2048) << cols;
    }
    const std::string name = cuda_backend::kernel_name(text);
    if (names.insert(name).second) source += cuda_backend::emit_cuda_kernel(k, name, cols);
  }
  // warp rows of 1, 65, 256 and warp_limit elements (1, 4, 8 and 32 slots), block rows
  // cached (warp_limit + 1 and 2048 share it) and streamed (2049 and 50257 share it)
  EXPECT_EQ(names.size(), 6u);
  EXPECT_GT(compile_or_report(source).size(), 1000u);
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

// The i-th of many different small pointwise kernels: f(x) op g(y), ops picked by i.
Kernel distinct_kernel(size_t i) {
  std::vector<kiln::OpId> unary = ops_with_functor(false), binary;
  for (kiln::OpId op : ops_with_functor(true))
    if (kiln::op_info(op).dtype_rule != kiln::DTypeRule::Bool) binary.push_back(op);
  Builder b;
  b.k.rank = 1;
  const DType f = DType::Float32;
  const int32_t x = b.load(b.operand(f, InnerStride::Contiguous, false), f);
  const int32_t y = b.load(b.operand(f, InnerStride::Contiguous, false), f);
  const size_t u = unary.size();
  const int32_t a = b.math(unary[i % u], f, x);
  const int32_t c = b.math(unary[(i / u) % u], f, y);
  b.store(b.math(binary[(i / u / u) % binary.size()], f, a, c),
          b.operand(f, InnerStride::Contiguous, true));
  return b.k;
}

// The i-th of many different cheap kernels (a bias-add-activation's size): x, y and z
// combined by three arithmetic ops picked by i.
Kernel cheap_kernel(size_t i) {
  using kiln::OpId;
  const OpId ops[] = {OpId::Add, OpId::Sub, OpId::Mul, OpId::Div, OpId::Maximum, OpId::Minimum};
  Builder b;
  b.k.rank = 1;
  const DType f = DType::Float32;
  int32_t acc = b.load(b.operand(f, InnerStride::Contiguous, false), f);
  for (int d = 0; d < 3; ++d, i /= 6)
    acc = b.math(ops[i % 6], f, acc, b.load(b.operand(f, InnerStride::Contiguous, false), f));
  b.store(acc, b.operand(f, InnerStride::Contiguous, true));
  return b.k;
}

// n different kernels, named by their content as the CUDA backend names them.
std::vector<cuda_backend::KernelSource> distinct_kernels(size_t n, bool cheap = false) {
  std::vector<cuda_backend::KernelSource> out;
  for (size_t i = 0; i < n; ++i) {
    const Kernel k = cheap ? cheap_kernel(i) : distinct_kernel(i);
    const std::string name = cuda_backend::kernel_name(cuda_backend::emit_cuda_kernel(k, "kiln_k"));
    out.push_back({name, cuda_backend::emit_cuda_kernel(k, name)});
  }
  return out;
}

// The bytes of each kernel's code section (".text.<name>") in a CUBIN (an ELF64 file).
std::map<std::string, std::string> kernel_code(const std::string& cubin) {
  auto u16 = [&](size_t at) {
    uint16_t v;
    std::memcpy(&v, cubin.data() + at, 2);
    return static_cast<size_t>(v);
  };
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, cubin.data() + at, 4);
    return static_cast<size_t>(v);
  };
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, cubin.data() + at, 8);
    return static_cast<size_t>(v);
  };
  std::map<std::string, std::string> out;
  if (cubin.size() < 64 ||
      cubin.compare(0, 4,
                    "\x7f"
                    "ELF") != 0 ||
      cubin[4] != 2)
    return out;
  const size_t shoff = u64(0x28), shentsize = u16(0x3a), shnum = u16(0x3c), shstrndx = u16(0x3e);
  const size_t names_at = u64(shoff + shstrndx * shentsize + 0x18);
  for (size_t i = 0; i < shnum; ++i) {
    const size_t h = shoff + i * shentsize;
    const std::string name(cubin.data() + names_at + u32(h));
    if (name.rfind(".text.", 0) == 0)
      out[name.substr(6)] = cubin.substr(u64(h + 0x18), u64(h + 0x20));
  }
  return out;
}

TEST(CudaCodegen, IdenticalKernelsGetOneNameAndDifferentKernelsDifferentNames) {
  const Kernel a = every_op(DType::Float32, InnerStride::Contiguous, 1);
  const Kernel b = every_op(DType::Float32, InnerStride::Strided, 1);
  const std::string na = cuda_backend::kernel_name(cuda_backend::emit_cuda_kernel(a, "kiln_k"));
  EXPECT_EQ(na, cuda_backend::kernel_name(cuda_backend::emit_cuda_kernel(
                    every_op(DType::Float32, InnerStride::Contiguous, 1), "kiln_k")));
  EXPECT_NE(na, cuda_backend::kernel_name(cuda_backend::emit_cuda_kernel(b, "kiln_k")));
  EXPECT_EQ(na.size(), 5u + 32u);
  EXPECT_EQ(na.rfind("kiln_", 0), 0u);
  const auto many = distinct_kernels(64);
  for (size_t i = 0; i < many.size(); ++i)
    for (size_t j = 0; j < i; ++j) EXPECT_NE(many[i].name, many[j].name) << i << " " << j;
}

// Every kernel in exactly one program; at most one program per thread; a program below
// kMinProgramMs of estimated work only when the whole trace is.
void expect_partition(const std::vector<double>& costs, int threads) {
  const auto programs = cuda_backend::plan_programs(costs, threads);
  double total = 0;
  for (double c : costs) total += c;
  EXPECT_LE(programs.size(), static_cast<size_t>(threads));
  std::vector<int> seen(costs.size(), 0);
  for (const auto& p : programs) {
    ASSERT_FALSE(p.empty());
    EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
    for (size_t k : p) ++seen.at(k);
  }
  for (size_t k = 0; k < costs.size(); ++k) EXPECT_EQ(seen[k], 1) << k;
  if (total < 2 * cuda_backend::kMinProgramMs) {
    EXPECT_LE(programs.size(), 1u);
  }
  EXPECT_LE(programs.size(),
            std::max<size_t>(1, static_cast<size_t>(total / cuda_backend::kMinProgramMs)));
}

TEST(CudaCodegen, ProgramsPartitionTheKernelsAtMostOnePerThread) {
  using cuda_backend::plan_programs;
  EXPECT_TRUE(plan_programs({}, 16).empty());
  EXPECT_EQ(plan_programs({50}, 16).size(), 1u);
  EXPECT_EQ(plan_programs(std::vector<double>(7, 50), 16).size(), 1u);  // a small trace
  EXPECT_EQ(plan_programs(std::vector<double>(1000, 50), 1).size(), 1u);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(20, 800);
  for (size_t n : {size_t{1}, size_t{8}, size_t{23}, size_t{375}, size_t{4096}}) {
    std::vector<double> costs(n);
    for (double& c : costs) c = cost(rng);
    for (int threads : {1, 2, 3, 16}) expect_partition(costs, threads);
  }
}

// A GPT step's kernels (docs/results/nvrtc_program_balance.txt): two heavy kernels
// among light ones. Contiguous chunks of equal counts put both heavy ones in one
// program (its compile the whole trace's wall time); balanced programs keep each heavy
// one apart and no program above the heaviest kernel or the average's share, whichever
// is larger, plus one light kernel.
TEST(CudaCodegen, ProgramsAreBalancedByEstimatedCost) {
  std::vector<double> costs = {730, 90, 710, 70, 330, 190, 180, 60, 440, 380};
  for (int i = 0; i < 28; ++i) costs.push_back(50 + i % 5 * 10);
  double total = 0, heaviest = 0, lightest = 1e9;
  for (double c : costs)
    total += c, heaviest = std::max(heaviest, c), lightest = std::min(lightest, c);
  for (int threads : {4, 9, 16}) {
    const auto programs = cuda_backend::plan_programs(costs, threads);
    ASSERT_EQ(programs.size(), static_cast<size_t>(threads));
    double longest = 0;
    for (const auto& p : programs) {
      double load = 0;
      for (size_t k : p) load += costs[k];
      longest = std::max(longest, load);
      if (std::find(p.begin(), p.end(), 0u) != p.end() && threads >= 9) {
        EXPECT_EQ(std::count(p.begin(), p.end(), 2u), 0) << "both heavy kernels in one program";
      }
    }
    EXPECT_LE(longest, std::max(heaviest, total / threads) + 90) << threads << " threads";
  }
}

// The estimate ranks what is slow to compile above what is not: a row kernel with
// Philox draws above a copy.
TEST(CudaCodegen, CompileCostEstimateCountsUnrolledLoopsAndPhiloxDraws) {
  const std::string copy = "extern \"C\" __global__ void k(float* a) { a[0] = a[1]; }";
  const std::string unrolled = copy + "\n#pragma unroll\nfor (;;) {}\n#pragma unroll\n";
  const std::string draws = unrolled + "kiln::philox::rand_value(1, 2, 3, 24)";
  EXPECT_LT(cuda_backend::estimated_compile_ms(copy), cuda_backend::estimated_compile_ms(unrolled));
  EXPECT_LT(cuda_backend::estimated_compile_ms(unrolled),
            cuda_backend::estimated_compile_ms(draws));
}

TEST(CudaCodegen, ThreadCountComesFromKiln_NVRTC_THREADS) {
  const char* before = std::getenv("KILN_NVRTC_THREADS");
  const std::string saved = before ? before : "";
  setenv("KILN_NVRTC_THREADS", "3", 1);
  EXPECT_EQ(cuda_backend::nvrtc_threads(), 3);
  setenv("KILN_NVRTC_THREADS", "1000", 1);
  EXPECT_EQ(cuda_backend::nvrtc_threads(), 64);
  setenv("KILN_NVRTC_THREADS", "zero", 1);  // not a number: the default
  const int fallback = cuda_backend::nvrtc_threads();
  unsetenv("KILN_NVRTC_THREADS");
  EXPECT_EQ(fallback, cuda_backend::nvrtc_threads());
  EXPECT_GE(fallback, 1);
  EXPECT_LE(fallback, 16);
  if (before) setenv("KILN_NVRTC_THREADS", saved.c_str(), 1);
}

// The kernels compiled as several programs on several threads are the kernels of one
// program: every kernel in exactly one program's CUBIN, with the same machine code (but
// for a few bytes of relocated addresses).
TEST(CudaCodegen, ChunkedParallelCompileGivesTheKernelsOfOneProgram) {
  const auto kernels = distinct_kernels(13);
  const std::string& prelude = cuda_backend::cuda_prelude();
  const auto one = cuda_backend::compile_programs(prelude, kernels, "sm_90", 1);
  ASSERT_EQ(one.size(), 1u);
  const auto whole = kernel_code(one[0].cubin);
  const auto split = cuda_backend::compile_programs(prelude, kernels, "sm_90", 3);
  ASSERT_EQ(split.size(), 3u);
  std::map<std::string, int> seen;
  for (const auto& p : split) {
    const auto code = kernel_code(p.cubin);
    EXPECT_EQ(code.size(), p.kernels.size());
    for (size_t q : p.kernels) {
      const std::string& name = kernels[q].name;
      ++seen[name];
      ASSERT_TRUE(code.count(name)) << name;
      ASSERT_TRUE(whole.count(name)) << name;
      EXPECT_FALSE(code.at(name).empty());
      EXPECT_EQ(code.at(name).size(), whole.at(name).size()) << name;
      int differ = 0;
      for (size_t b = 0; b < code.at(name).size() && b < whole.at(name).size(); ++b)
        differ += code.at(name)[b] != whole.at(name)[b];
      // Only relocated addresses (of the headers' constant tables) may differ.
      EXPECT_LE(differ, static_cast<int>(code.at(name).size() / 100)) << name;
    }
  }
  EXPECT_EQ(seen.size(), kernels.size());
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name;
}

TEST(CudaCodegen, ACompileErrorInOneProgramIsThrownAfterAllThreadsFinish) {
  auto kernels = distinct_kernels(12);
  kernels.back().body += "\nthis is not CUDA;\n";
  try {
    cuda_backend::compile_programs(cuda_backend::cuda_prelude(), kernels, "sm_90", 2);
    FAIL() << "expected an NVRTC error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("[nvrtc] compile failed"), std::string::npos) << e.what();
  }
}

// The timing table of docs/results/nvrtc_compile_cpu.txt (run with
// --gtest_also_run_disabled_tests; KILN_TABLE_CHEAP=1 for 3-op kernels): wall and
// process CPU ms of compile_programs for n different kernels on 1 and 2 threads.
TEST(CudaCodegen, DISABLED_CompileTimeTable) {
  const std::string& prelude = cuda_backend::cuda_prelude();
  const bool cheap = std::getenv("KILN_TABLE_CHEAP") != nullptr;
  std::printf("%s kernels; n = 0: the prelude alone\n%8s %9s | %10s %10s | %10s %10s %9s\n",
              cheap ? "cheap (3 arithmetic ops)" : "math (2 unary + 1 binary op)", "kernels",
              "programs", "1t wall", "1t cpu", "2t wall", "2t cpu", "cpu/kern");
  for (size_t n : {size_t{0}, size_t{1}, size_t{4}, size_t{8}, size_t{16}, size_t{64}}) {
    const auto kernels = distinct_kernels(n, cheap);
    double wall[2], cpu[2];
    size_t programs = 1;
    for (int threads : {1, 2}) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      if (n == 0)
        cuda_backend::compile_cubin(prelude, "sm_90");
      else
        programs = cuda_backend::compile_programs(prelude, kernels, "sm_90", threads).size();
      cpu[threads - 1] = 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
      wall[threads - 1] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    std::printf("%8zu %9zu | %10.0f %10.0f | %10.0f %10.0f %9.0f\n", n, programs, wall[0], cpu[0],
                wall[1], cpu[1], n ? cpu[0] / static_cast<double>(n) : 0.0);
  }
}

}  // namespace
#else
TEST(CudaCodegen, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif
