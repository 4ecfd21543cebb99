// The LLVM CPU JIT: fused results equal eager results (and the double-precision
// reference) for pointwise ops and dtypes, broadcasting, non-contiguous inputs, scalars,
// row reductions, softmax/layer_norm and in-place updates; kernel counts of the seed
// examples; the kernel IR simplifier; the disk cache across processes (hits, a corrupt
// file rebuilt, an untrusted directory refused); the debug dump; eager fallback.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"
#include "ops/api.h"
#include "ops/cpu/simd.h"
#include "tracer_util.h"
#ifdef KILN_WITH_LLVM
#include "jit/llvm/llvm_jit.h"
#endif

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

class JitCpu : public LlvmJitTest {};

// Runs f four times in a region (two warmups, a compile, replays) and returns the last
// result; checks that a single trace compiled with the LLVM backend.
template <class F>
Tensor traced(F&& f, int* kernels = nullptr) {
  Tensor out;
  for (int i = 0; i < 4; ++i) {
    tr::Region region;
    out = f();
  }
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(r.traces.size(), 1u) << r.table();
  if (!r.traces.empty()) {
    EXPECT_EQ(r.traces[0].backend, "llvm") << r.table();
    EXPECT_GE(r.traces[0].replays, 1) << r.table();
    if (kernels) *kernels = r.traces[0].kernels;
  }
  return out;
}

void expect_matches(const Tensor& fused, const Tensor& eager_result, Tol tol) {
  EXPECT_EQ(fused.dtype(), eager_result.dtype());
  EXPECT_TRUE(all_close(fused, read(eager_result), tol));
}

Tol loose(DType d) {
  Tol t = tol_pointwise(d);
  if (d == DType::Float64) t = Tol{1e-10, 1e-10};  // xsimd vs libm transcendentals differ in ulps
  if (d == DType::Float16 || d == DType::BFloat16) {  // fused keeps float32 in between
    t.rtol = std::max(t.rtol, 2e-2);
    t.atol = std::max(t.atol, 2e-2);
  }
  return t;
}

using UnaryFn = Tensor (*)(const Tensor&);

struct UnaryCase {
  const char* name;
  UnaryFn fn;
  Range range;
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", kiln::neg, {}},
      {"abs", kiln::abs, {}},
      {"exp", kiln::exp, {}},
      {"log", kiln::log, {0.1, 4.0}},
      {"sqrt", kiln::sqrt, {0.0, 4.0}},
      {"rsqrt", kiln::rsqrt, {0.1, 4.0}},
      {"sin", kiln::sin, {-6.0, 6.0}},
      {"cos", kiln::cos, {-6.0, 6.0}},
      {"tanh", kiln::tanh, {-5.0, 5.0}},
      {"sigmoid", kiln::sigmoid, {-8.0, 8.0}},
      {"relu", kiln::relu, {}},
      {"silu", kiln::silu, {}},
      {"reciprocal", kiln::reciprocal, {0.2, 3.0}},
      {"log1p", kiln::log1p, {-0.5, 4.0}},
      {"erf", kiln::erf, {-4.5, 4.5}},
  };
  return cases;
}

}  // namespace

class JitUnary : public JitCpu, public ::testing::WithParamInterface<DType> {};

TEST_P(JitUnary, EveryUnaryOpFusedWithAScalarEpilogue) {
  const DType d = GetParam();
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    tr::reset();
    Tensor x = make(random_host({37, 19}, d, c.range), d);
    auto f = [&] { return c.fn(x) * 1.5 + 0.25; };
    int kernels = 0;
    Tensor fused = traced(f, &kernels);
    EXPECT_EQ(kernels, 1);
    expect_matches(fused, eager(f), loose(d));
    // And against the double-precision reference for float32.
    if (d == DType::Float32) {
      const Host ref = map(read(x), [&](double v) {
        const double y =
            read(eager([&] { return c.fn(make(Host({1}, {v}), DType::Float64)); })).v[0];
        return y * 1.5 + 0.25;
      });
      EXPECT_TRUE(all_close(fused, ref, Tol{2e-5, 2e-5}));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, JitUnary,
                         ::testing::Values(DType::Float32, DType::Float64, DType::Float16,
                                           DType::BFloat16),
                         param_name);

// float32 erf in the fused kernels is ops/cpu/vectorizable_math.h's erf_by_exp (on hosts
// without AVX2, and for a kernel's scalar remainder elsewhere; the next test) (a
// Taylor branch below |x| = 1, exp times a fitted polynomial above), eager's is
// xsimd::erf / erff: both within a few ulp of the float64 erf on fresh random values
// across both branches, the split, the clamp at 4, tiny values, and +-inf / NaN; and the
// erf GELU built on it.
TEST_F(JitCpu, ErfFloat32WithinAFewUlpOfFloat64) {
  Host h = random_host({4096}, DType::Float32, {-6.0, 6.0});
  const Host near_split = random_host({512}, DType::Float32, {0.9, 1.1});
  const Host tiny = random_host({512}, DType::Float32, {-1e-3, 1e-3});
  h.v.insert(h.v.end(), near_split.v.begin(), near_split.v.end());
  for (double v : tiny.v)  // far below 1e-3, still normal floats
    h.v.push_back(static_cast<double>(static_cast<float>(v * 1e-20)));
  const double inf = std::numeric_limits<double>::infinity();
  for (double v : {0.0, -0.0, 1.0, -1.0, 4.0, -4.0, 3.92, 1e-38, inf, -inf,
                   std::numeric_limits<double>::quiet_NaN()})
    h.v.push_back(static_cast<double>(static_cast<float>(v)));
  h.sizes = {static_cast<int64_t>(h.v.size())};
  Tensor x = make(h, DType::Float32);
  const Host ref = map(h, [](double v) { return std::erf(v); });
  // 2.5 ulp of float32 near 1 is 1.5e-7; relative 3 ulp elsewhere.
  const Tol tol{3.6e-7, 1.6e-7};
  EXPECT_TRUE(all_close(eager([&] { return kiln::erf(x); }), ref, tol));
  // Doubling is exact: the fused kernel's erf is compared as it is.
  const Host ref2 = map(ref, [](double v) { return 2.0 * v; });
  EXPECT_TRUE(all_close(traced([&] { return kiln::erf(x) * 2.0; }), ref2, tol));
  tr::reset();
  const Host gelu_ref = map(h, [](double v) { return v * (1.0 + std::erf(v / std::sqrt(2.0))); });
  EXPECT_TRUE(
      all_close(traced([&] { return kiln::gelu(x, false) * 2.0; }), gelu_ref, Tol{3.6e-7, 6e-7}));
}

// Where the host has AVX2 and FMA, float erf and the erf GELU in a fused kernel run the
// eager kernels' xsimd code for every full vector of 8 lanes
// (jit/llvm/bitcode/vector_functions.cpp): on inputs all in xsimd erf's short branch
// (|x| < 2/3), in its long one and mixed, the fused results equal eager's (bit for bit in
// the release build) where the eager kernels are the AVX2 ones (4096 elements: no scalar
// remainder), and stay within tolerance of float64.
TEST_F(JitCpu, ErfAndGeluVectorFormsAreTheEagerKernels) {
  const bool avx2 = std::string(kiln::cpu::simd::kernels().arch) == "avx2";
  for (bool gelu : {false, true}) {
    for (double range : {0.6, 3.0, 8.0}) {
      tr::reset();
      const Host h = random_host({4096}, DType::Float32, {-range, range});
      Tensor x = make(h, DType::Float32);
      auto f = [&] { return (gelu ? kiln::gelu(x, false) : kiln::erf(x)) * 0.5; };
      const Host fused = read(traced(f));
      const Host ref = read(eager(f));
      // Bit-equal in the release build; the sanitizer build compiles the eager kernels
      // with other optimizations, whose contraction rounds some lanes an ulp apart.
      if (avx2) {
        EXPECT_TRUE(all_close(fused, ref, Tol{1.2e-7, 1e-7})) << gelu << " range " << range;
      }
      const Host exact = map(h, [&](double v) {
        return 0.5 * (gelu ? 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))) : std::erf(v));
      });
      EXPECT_TRUE(all_close(fused, exact, Tol{3.6e-7, 6e-7})) << gelu << " range " << range;
    }
  }
}

// A masked softmax row (jit/lower.cpp's exp_of_shifted, guarded: the row's input is an
// addition made in the kernel): the dropped keys (-inf) and
// scores far below the row's max give exactly 0 fused, the rest eager's values, a row
// masked entirely NaN as in eager and PyTorch; log_softmax and logsumexp the same rows.
TEST_F(JitCpu, MaskedSoftmaxRowsMatchEager) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::Float32, DType::Float64}) {
    tr::reset();
    Host h = random_host({6, 64}, dt, {-4.0, 4.0});
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t c = 0; c < 64; ++c)
        if (c > 10 * r + 5) h.v[static_cast<size_t>(r * 64 + c)] = -inf;  // causal-like
    h.v[64 + 3] = -200.0;  // far below the max, finite
    for (int64_t c = 0; c < 64; ++c) h.v[static_cast<size_t>(5 * 64 + c)] = -inf;  // all masked
    Tensor x = make(h, dt);
    auto soft = [&] { return kiln::softmax(x + 0.0, -1); };  // an addition: the guarded form
    const Host fused = read(traced(soft));
    const Host ref = read(eager(soft));
    for (size_t i = 0; i < h.v.size(); ++i) {
      if (i >= 5 * 64) {
        EXPECT_TRUE(std::isnan(fused.v[i])) << i;
      } else if (std::isinf(h.v[i])) {
        EXPECT_EQ(fused.v[i], 0.0) << i;
      }
    }
    EXPECT_TRUE(all_close(fused, ref, tol_pointwise(dt)));
    tr::reset();
    auto logsoft = [&] { return kiln::log_softmax(x + 0.0, -1); };
    EXPECT_TRUE(all_close(read(traced(logsoft)), read(eager(logsoft)), tol_pointwise(dt)));
  }
}

TEST_F(JitCpu, GeluBothFormsAndClampAndCast) {
  for (bool approx : {false, true}) {
    tr::reset();
    Tensor x = random_tensor({64, 33});
    auto f = [&] { return kiln::clamp(kiln::gelu(x, approx) * 2.0, -1.0, 1.5).to(DType::Float64); };
    expect_matches(traced(f), eager(f), Tol{1e-6, 1e-6});
  }
}

TEST_F(JitCpu, BinaryOpsBroadcastingAndDtypePromotion) {
  struct Case {
    Dims a, b;
    DType da, db;
  };
  const std::vector<Case> cases = {
      {{8, 13}, {13}, DType::Float32, DType::Float32},
      {{8, 1}, {1, 13}, DType::Float32, DType::Float64},
      {{3, 4, 5}, {4, 1}, DType::Int32, DType::Float32},
      {{6, 7}, {6, 7}, DType::Int64, DType::Int32},
      {{5, 6}, {6}, DType::Float16, DType::Float32},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(dims_string(c.a) + " x " + dims_string(c.b));
    Tensor a = make(random_host(c.a, c.da, Range{-3, 3, -5, 5, true, 0.1}), c.da);
    Tensor b = make(random_host(c.b, c.db, Range{-3, 3, -5, 5, true, 0.1}), c.db);
    auto arith = [&] {
      Tensor s = a + b, p = a * b, m = kiln::maximum(a, b) - kiln::minimum(a, b);
      return (s * p + m) * 0.5 - 2 * a;
    };
    tr::reset();
    expect_matches(traced(arith), eager(arith), loose(promote_types(c.da, c.db)));
    auto logic = [&] {
      Tensor lt = a < b, ge = a >= b, ne = a != b;
      return kiln::where(lt, a * 2.0, b) + kiln::where(ge, 1.0 * a, -1.0 * b) +
             (a == b).to(DType::Float32) - ne.to(DType::Float32);
    };
    tr::reset();
    expect_matches(traced(logic), eager(logic), loose(DType::Float32));
    auto division = [&] { return a / b + kiln::pow(kiln::abs(a) + 1.0, 1.5); };
    tr::reset();
    // Eager rounds float16 intermediates (|a| + 1) per op; fused code keeps float32.
    Tol tol = loose(c.da == DType::Float16 ? c.da : promote_types(c.da, c.db));
    tol.rtol = std::max(tol.rtol, 1e-3);
    tol.atol = std::max(tol.atol, 1e-3);
    expect_matches(traced(division), eager(division), tol);
  }
}

TEST_F(JitCpu, NonContiguousInputsAndScalarsThatChange) {
  for (Layout layout : {Layout::Transposed, Layout::Stepped, Layout::Offset, Layout::Permuted}) {
    SCOPED_TRACE(name(layout));
    tr::reset();
    const Host h = random_host({6, 10, 4}, DType::Float32);
    Tensor x = make(h, DType::Float32, layout);
    Tensor y = random_tensor({6, 10, 4});
    double s = 0.5;
    auto f = [&] { return kiln::sigmoid(x * s + y) - x; };
    Tensor out;
    for (int i = 0; i < 5; ++i) {
      s = 0.25 * (i + 1);  // a scalar argument: a new value each call, the same trace
      tr::Region region;
      out = f();
    }
    EXPECT_EQ(count_traces(), 1u);
    expect_matches(out, eager(f), Tol{1e-6, 1e-6});
  }
}

TEST_F(JitCpu, RowReductionsWithProducersAndConsumers) {
  Tensor x = random_tensor({33, 70});
  struct Case {
    const char* name;
    std::function<Tensor()> f;
  };
  const std::vector<Case> cases = {
      {"sum of (x*2+1)", [&] { return kiln::sum(x * 2 + 1, {1}); }},
      {"mean keepdim", [&] { return kiln::mean(kiln::exp(x), {1}, true) * 3; }},
      {"amax/amin", [&] { return kiln::amax(x * x, {1}) - kiln::amin(x, {1}); }},
      {"var", [&] { return kiln::var(x + 1, {1}, 1, true) + 0.5; }},
      {"logsumexp", [&] { return kiln::logsumexp(x * 3, {1}) - 1; }},
      {"logsumexp keepdim", [&] { return x - kiln::logsumexp(x, {1}, true); }},
      {"mean/var by hand",
       [&] {
         Tensor mu = kiln::mean(x, {1}, true);
         Tensor d = x - mu;
         return d / kiln::sqrt(kiln::mean(d * d, {1}, true) + 1e-5);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    tr::reset();
    int kernels = 0;
    Tensor fused = traced(c.f, &kernels);
    EXPECT_EQ(kernels, 1);
    expect_matches(fused, eager(c.f), Tol{1e-5, 1e-5});
  }
}

// logsumexp's special rows fused as eagerly: -inf rows, +inf, NaN, large values.
TEST_F(JitCpu, LogSumExpOfInfiniteRowsMatchesEager) {
  const double inf = std::numeric_limits<double>::infinity();
  Host h = random_host({6, 40}, DType::BFloat16);  // exact in every float type
  for (int64_t j = 0; j < 40; ++j) {
    h.at({0, j}) = -inf;
    h.at({1, j}) = 1000 + 8 * j;  // exact in bfloat16
  }
  h.at({2, 3}) = inf;
  h.at({3, 5}) = std::numeric_limits<double>::quiet_NaN();
  h.at({4, 7}) = inf;
  h.at({4, 8}) = -inf;
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16}) {
    SCOPED_TRACE(name(d));
    tr::reset();
    Tensor x = make(h, d);
    auto f = [&] { return kiln::logsumexp(x + 0, {1}) * 1; };
    int kernels = 0;
    Tensor fused = traced(f, &kernels);
    EXPECT_EQ(kernels, 1);
    expect_matches(fused, eager(f), loose(d));
  }
}

TEST_F(JitCpu, SeedExamplesKernelCounts) {
  Tensor x = random_tensor({64, 256});
  auto gelu = [&] { return 0.5 * x * (1 + kiln::tanh(0.7978845608 * (x + 0.044715 * x * x * x))); };
  auto softmax = [&] {
    Tensor e = kiln::exp(x - kiln::amax(x, {1}, true));
    return e / kiln::sum(e, {1}, true);
  };
  Tensor w = random_tensor({256}), b = random_tensor({256});
  auto layernorm = [&] {
    Tensor mu = kiln::mean(x, {1}, true);
    Tensor var = kiln::mean((x - mu) * (x - mu), {1}, true);
    return (x - mu) / kiln::sqrt(var + 1e-5) * w + b;
  };
  auto softmax_op = [&] { return kiln::softmax(x * 0.125, -1); };
  auto layer_norm_op = [&] { return kiln::layer_norm(x + 1, {256}, w, b); };
  for (auto& [name, f] : std::vector<std::pair<const char*, std::function<Tensor()>>>{
           {"gelu", gelu},
           {"softmax", softmax},
           {"layernorm", layernorm},
           {"softmax op", softmax_op},
           {"layer_norm op", layer_norm_op}}) {
    SCOPED_TRACE(name);
    tr::reset();
    int kernels = 0;
    Tensor fused = traced(f, &kernels);
    EXPECT_EQ(kernels, 1) << tr::explain().table();
    expect_matches(fused, eager(f), Tol{2e-5, 2e-5});
  }
  // The MLP: three BLAS calls (linear with bias), the relus fused after them.
  Tensor in = random_tensor({32, 1});
  Tensor w1 = random_tensor({64, 1}), b1 = random_tensor({64});
  Tensor w2 = random_tensor({64, 64}), b2 = random_tensor({64});
  Tensor w3 = random_tensor({1, 64}), b3 = random_tensor({1});
  auto mlp = [&] {
    Tensor h = kiln::relu(kiln::linear(in, w1, b1));
    h = kiln::relu(kiln::linear(h, w2, b2));
    return kiln::linear(h, w3, b3);
  };
  tr::reset();
  int kernels = 0;
  Tensor fused = traced(mlp, &kernels);
  EXPECT_EQ(kernels, 5) << tr::explain().table();
  expect_matches(fused, eager(mlp), Tol{1e-5, 1e-5});
}

TEST_F(JitCpu, InPlaceUpdatesAndHeldIntermediates) {
  Tensor x = random_tensor({12, 9});
  Tensor acc = kiln::zeros({12, 9});
  Tensor ref = kiln::zeros({12, 9});
  for (int i = 0; i < 8; ++i) {
    {
      tr::Region region;
      acc.add_(kiln::tanh(x) * 0.5);
    }
    eager([&] { return ref.add_(kiln::tanh(x) * 0.5); });
  }
  EXPECT_TRUE(all_close(acc, read(ref), Tol{1e-5, 1e-6}));
  // A value held only from some call on: the replay still hands out the right tensor,
  // and what the user held before is never overwritten by a later replay.
  tr::reset();
  std::vector<Tensor> kept;
  for (int i = 0; i < 6; ++i) {
    tr::Region region;
    Tensor y = kiln::exp(x * (0.1 * i));
    Tensor z = y + 1;
    if (i >= 4) kept.push_back(y);
    kept.push_back(z);
  }
  for (int i = 0, k = 0; i < 6; ++i) {
    const Host xs = read(x);
    auto expect = [&](double add) {
      return map(xs, [&](double v) {
        return std::exp(static_cast<float>(v * static_cast<float>(0.1 * i))) + add;
      });
    };
    if (i >= 4) {
      EXPECT_TRUE(all_close(kept[k++], expect(0), Tol{1e-5, 1e-6})) << i;
    }
    EXPECT_TRUE(all_close(kept[k++], expect(1), Tol{1e-5, 1e-6})) << i;
  }
}

TEST_F(JitCpu, OpsWithoutFusedCodeFallBackAndAreNoted) {
  Tensor a = make(random_host({5, 7}, DType::Int32, Range{-2, 2, 1, 4}), DType::Int32);
  auto f = [&] { return kiln::pow(a, a) + 1; };  // integer pow has no fused code
  Tensor fused = traced(f);
  expect_matches(fused, eager(f), tol_exact());
  const tr::ExplainReport r = tr::explain();
  ASSERT_FALSE(r.traces.empty());
  bool noted = false;
  for (const std::string& n : r.traces[0].notes) noted |= n.find("pow") != std::string::npos;
  EXPECT_TRUE(noted) << r.table();
}

TEST_F(JitCpu, BatchSizeChangeReusesTheKernelCode) {
#ifdef KILN_WITH_LLVM
  auto run = [&](int64_t batch) {
    Tensor x = random_tensor({batch, 24}), b = random_tensor({24});
    auto f = [&] { return kiln::relu(x + b) * 3.0 - 1.0; };
    expect_matches(traced(f), eager(f), Tol{1e-6, 1e-6});
  };
  run(16);
  const int64_t compiled = kiln::jit::llvm_backend::LlvmJit::instance().stats().compiled;
  tr::reset();
  run(48);  // a new trace (guards are exact), but the same kernel code
  EXPECT_EQ(kiln::jit::llvm_backend::LlvmJit::instance().stats().compiled, compiled);
#endif
}

TEST(KernelIr, SimplifyFoldsConstantsAndExactIdentities) {
  using namespace kiln::jit;
  Kernel k;
  k.operands = {KOperand{DType::Float32}, KOperand{DType::Float32}};
  KNode load;
  load.op = KOp::Load;
  load.operand = 0;
  const int32_t x = k.add(load);
  KNode c;
  c.op = KOp::Const;
  c.value = 1;
  const int32_t one = k.add(c);
  c.value = 0;
  const int32_t zero = k.add(c);
  c.value = 2;
  const int32_t two = k.add(c);
  using kiln::OpId;
  const int32_t m = k.add(math_node(OpId::Mul, DType::Float32, x, one));       // x * 1
  const int32_t a = k.add(math_node(OpId::Add, DType::Float32, m, zero));      // + 0
  const int32_t four = k.add(math_node(OpId::Mul, DType::Float32, two, two));  // 2 * 2 folds
  const int32_t out = k.add(math_node(OpId::Mul, DType::Float32, a, four));
  k.stores.push_back(KStore{out, 1});
  EXPECT_GT(simplify(k), 0);
  ASSERT_EQ(k.nodes.size(), 3u) << k.text();  // load, const 4, mul
  EXPECT_EQ(k.nodes[1].op, KOp::Const);
  EXPECT_EQ(k.nodes[1].value, 4.0);
  EXPECT_EQ(k.nodes[2].op, KOp::Binary);
  EXPECT_EQ(k.nodes[2].fn, kiln::OpId::Mul);
  EXPECT_EQ(k.nodes[k.stores[0].node].in[0], 0);
}

// ---- the disk cache, across processes

namespace {

[[maybe_unused]] std::string self_exe() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

// Runs the child test in a new process with the given cache dir; returns its exit code.
[[maybe_unused]] int run_child(const std::string& cache_dir, const std::string& out_file) {
  const std::string cmd = "KILN_COMPILE_SYNC=1 KILN_CACHE_DIR='" + cache_dir +
                          "' KILN_JIT_CHILD_OUT='" + out_file + "' '" + self_exe() +
                          "' --gtest_filter=JitCacheChild.CompileAndReport > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// Only meaningful as the child of JitCache.SecondProcessCompilesNothing.
TEST(JitCacheChild, CompileAndReport) {
  const char* out = std::getenv("KILN_JIT_CHILD_OUT");
  if (!out) GTEST_SKIP() << "runs as a child process of the disk cache test";
#ifdef KILN_WITH_LLVM
  tr::reset();
  tr::config().warmup = 2;
  Tensor x = make(Host({64, 32}, std::vector<double>(64 * 32, 0.5)), DType::Float32);
  Tensor y;
  for (int i = 0; i < 4; ++i) {
    tr::Region region;
    Tensor e = kiln::exp(x - kiln::amax(x, {1}, true));
    y = e / kiln::sum(e, {1}, true) + kiln::tanh(x) * 0.5;
  }
  const auto s = kiln::jit::llvm_backend::LlvmJit::instance().stats();
  std::ofstream(out) << s.compiled << " " << s.disk_hits << " " << read(y).v[0] << "\n";
#endif
}

TEST(JitCache, SecondProcessCompilesNothingAndCorruptFilesAreRebuilt) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#else
  const std::string dir = std::filesystem::temp_directory_path().string() + "/kiln-cache-test-" +
                          std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const std::string out = dir + ".out";
  ASSERT_EQ(run_child(dir, out), 0);
  long compiled = -1, hits = -1;
  double value = 0;
  std::istringstream(slurp(out)) >> compiled >> hits >> value;
  EXPECT_GE(compiled, 1);
  EXPECT_EQ(hits, 0);
  const double expected = 1.0 / 32 + std::tanh(0.5) * 0.5;
  EXPECT_NEAR(value, expected, 1e-6);

  ASSERT_EQ(run_child(dir, out), 0);  // a new process: everything from the disk cache
  std::istringstream(slurp(out)) >> compiled >> hits >> value;
  EXPECT_EQ(compiled, 0);
  EXPECT_GE(hits, 1);
  EXPECT_NEAR(value, expected, 1e-6);

  // Corrupt every cached file (flip a payload byte; truncate another): rebuilt, not loaded.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/cpu")) {
    const std::string p = e.path().string();
    std::string data = slurp(p);
    if (files++ % 2 == 0) {
      data[data.size() - 7] ^= 0x5a;
    } else {
      data.resize(data.size() / 2);
    }
    std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
  }
  ASSERT_GE(files, 1);
  ASSERT_EQ(run_child(dir, out), 0);
  std::istringstream(slurp(out)) >> compiled >> hits >> value;
  EXPECT_GE(compiled, 1);
  EXPECT_EQ(hits, 0);
  EXPECT_NEAR(value, expected, 1e-6);

  // A cache directory others can write to is not used at all.
  chmod((dir + "/cpu").c_str(), 0777);
  setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  kiln::jit::KernelCache cache("cpu");
  EXPECT_FALSE(cache.enabled());
  EXPECT_NE(cache.disabled_reason().find("not trusted"), std::string::npos)
      << cache.disabled_reason();
  unsetenv("KILN_CACHE_DIR");
  std::filesystem::remove_all(dir);
  std::filesystem::remove(out);
#endif
}

TEST(JitCache, FilesOfAnotherOwnerOrWritableByOthersAreNotLoaded) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/kiln-cache-perm-" +
                          std::to_string(getpid());
  std::filesystem::remove_all(dir);
  setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  kiln::jit::KernelCache cache("cpu");
  unsetenv("KILN_CACHE_DIR");
  ASSERT_TRUE(cache.enabled()) << cache.disabled_reason();
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  cache.store("k1", "payload-one");
  auto got = cache.load("k1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, "payload-one");
  chmod(cache.path_for("k1").c_str(), 0666);
  EXPECT_FALSE(cache.load("k1").has_value());
  EXPECT_FALSE(cache.load("missing").has_value());
  std::filesystem::remove_all(dir);
}

// The row cache (jit/llvm/codegen.cpp): softmax(tanh(x) * 2) caches exp (the sum's pass
// and the output's) and tanh (the max's pass and the sum's) in row buffers; rows longer
// than the cache's bound run the uncached copy of the loops. Both equal a float64
// reference, and the cached kernel's IR holds the row buffers (dynamic allocas).
TEST_F(JitCpu, RowCacheComputesCostlyNodesOnceAndMatchesTheReference) {
  const std::string dir = std::filesystem::temp_directory_path().string() + "/kiln-rowcache-" +
                          std::to_string(getpid());
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1000}, int64_t{20000}}) {
      tr::reset();
      std::filesystem::remove_all(dir);
      setenv("KILN_DEBUG_DIR", dir.c_str(), 1);
      const Host h = random_host({3, cols}, dt, {-3.0, 3.0});
      Tensor x = make(h, dt);
      auto f = [&] { return kiln::softmax(kiln::tanh(x) * 2.0, -1); };
      const Host fused = read(traced(f));
      unsetenv("KILN_DEBUG_DIR");
      Host want(h.sizes);
      for (int64_t r = 0; r < 3; ++r) {
        double max = -INFINITY, sum = 0;
        for (int64_t c = 0; c < cols; ++c) max = std::max(max, 2 * std::tanh(h.at({r, c})));
        for (int64_t c = 0; c < cols; ++c) sum += std::exp(2 * std::tanh(h.at({r, c})) - max);
        for (int64_t c = 0; c < cols; ++c)
          want.at({r, c}) = std::exp(2 * std::tanh(h.at({r, c})) - max) / sum;
      }
      EXPECT_TRUE(all_close(fused, want, tol_pointwise(dt))) << name(dt) << " cols " << cols;
      std::string ir;
      for (const auto& e : std::filesystem::directory_iterator(dir))
        ir += slurp(e.path().string() + "/kernel-0.ll");
      const std::string buffer =
          std::string("alloca ") + (dt == DType::Float32 ? "float" : "double");
      size_t buffers = 0;
      for (size_t at = ir.find(buffer); at != std::string::npos; at = ir.find(buffer, at + 1))
        ++buffers;
      if (cols > 1) {  // (a row of one element is not a row kernel)
        EXPECT_EQ(buffers, 2u) << name(dt) << " cols " << cols << "\n" << ir;
      }
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_F(JitCpu, DebugDumpWritesTraceIrLlvmIrAndTimes) {
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/kiln-dump-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  setenv("KILN_DEBUG_DIR", dir.c_str(), 1);
  Tensor x = random_tensor({128, 64});
  auto f = [&] { return kiln::softmax(kiln::relu(x) * 2.0, -1); };
  traced(f);
  unsetenv("KILN_DEBUG_DIR");
  int traces = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++traces;
    const std::string d = e.path().string();
    EXPECT_NE(slurp(d + "/trace.txt").find("softmax"), std::string::npos);
    const std::string fusion = slurp(d + "/fusion.txt");
    EXPECT_NE(fusion.find("== after fusion"), std::string::npos);
    EXPECT_NE(fusion.find("row kernel"), std::string::npos) << fusion;
    EXPECT_NE(slurp(d + "/kernel-0.ll").find("define"), std::string::npos);
    const std::string times = slurp(d + "/compile.txt");
    EXPECT_NE(times.find("total:"), std::string::npos);
    if (__builtin_cpu_supports("avx2")) {
      // The widest vector type in the optimized IR: 8 floats (256 bits), or 8 doubles
      // (512) where the f32 row sum is widened to accumulate in double.
      const size_t at = times.find("vector width ");
      ASSERT_NE(at, std::string::npos) << times;
      EXPECT_GE(std::stoi(times.substr(at + 13)), 256) << times;
    }
  }
  EXPECT_EQ(traces, 1);
  std::filesystem::remove_all(dir);
}

// The causal mask of nn.functional's attention composite: le(cols, rows) of [L, L] opens a
// kernel group the one-element fill (-inf) joins; where(keep, scores, fill) over
// [B, H, L, L] is the next group. The fill's value is made inside that group from its
// scalar (not stored, not read from memory), so neither group falls back to eager kernels
// (it did: "operand shape [] does not fit the group shape [16, 16]").
TEST_F(JitCpu, OneElementFillReadByALaterGroupIsMadeThere) {
  Tensor scores = random_tensor({2, 3, 16, 16});
  Tensor rows = kiln::arange(16).unsqueeze(1), cols = kiln::arange(16).unsqueeze(0);
  auto f = [&] {
    Tensor keep = kiln::le(cols, rows);
    Tensor masked = kiln::where(keep, scores, -std::numeric_limits<double>::infinity());
    return kiln::softmax(masked * 0.5, -1);
  };
  Tensor fused = traced(f);
  expect_matches(fused, eager(f), Tol{1e-6, 1e-6});
  // Against float64: row r keeps columns <= r.
  const Host s = read(scores);
  Host ref = s;
  for (int64_t b = 0; b < 6; ++b)
    for (int64_t r = 0; r < 16; ++r) {
      double m = -1e300, z = 0;
      const int64_t base = (b * 16 + r) * 16;
      for (int64_t c = 0; c <= r; ++c) m = std::max(m, 0.5 * s.v[base + c]);
      for (int64_t c = 0; c <= r; ++c) z += std::exp(0.5 * s.v[base + c] - m);
      for (int64_t c = 0; c < 16; ++c)
        ref.v[base + c] = c <= r ? std::exp(0.5 * s.v[base + c] - m) / z : 0.0;
    }
  EXPECT_TRUE(all_close(fused, ref, Tol{2e-6, 2e-6}));
  const tr::ExplainReport r = tr::explain();
  ASSERT_FALSE(r.traces.empty());
  for (const std::string& n : r.traces[0].notes)
    EXPECT_EQ(n.find("fell back"), std::string::npos) << n;
}
