// The CUDA JIT (NVRTC fused kernels replayed as CUDA Graphs). Every traced result is
// compared with the same program run eagerly on the GPU and eagerly on the CPU (an
// independent result) on fresh random inputs; one-kernel 16-bit programs are also compared
// with the float32 computation rounded once. Every trace must come from the "nvrtc"
// backend, run as a CUDA graph (a note says so) and have no eager fallback. Covered:
//   - every fusible unary op (and both GELUs) in float32 / float16 / bfloat16, one kernel;
//   - binary ops with broadcasting ([N,1] with [1,M]) and dtype promotion, comparisons
//     and where, clamp, pow with a float and a tensor exponent, casts;
//   - scalar arguments that change on every call (updated in the graph, no recompile);
//   - non-contiguous inputs (transposed, stepped, offset, permuted) and views taken
//     inside the trace, into pointwise and row groups;
//   - row reductions (sum / mean / amax / var with a producer and a consumer, softmax,
//     log_softmax, layer_norm with weight and bias) with cols 1, 7, 1000, 4096 and rows 1,
//     3000, in all three float dtypes, one kernel each; the seed examples' kernel counts;
//   - replays with a new input tensor on every call, every output kept and checked at the
//     end (a replay never overwrites what an earlier one handed out), and a value held
//     only from some call on;
//   - a batch-size change after compiling (64, 128, 64);
//   - a trace on cuda:1 with cuda:0 current (graph patched on its own device; 2 GPUs);
//   - an in-place optimizer step (momentum, w.add_) replayed several times;
//   - in-place writes into values library calls computed (empty+fill_, cat, avg_pool2d,
//     argmax), kept in what the user gets; an in-place store fused into a row kernel;
//   - matmul / linear with fused epilogues (2-layer MLPs) and their kernel counts;
//   - out of memory in a replay inside a traced loop, and the runtime working after it;
//   - kernels named by content: six identical layers share one kernel, reused by a later
//     trace; twelve different kernels compiled as 2 programs on KILN_NVRTC_THREADS=2;
//   - in a child process with a fresh KILN_CACHE_DIR: KILN_CUDA_JIT_FAIL=1 (correct
//     results through eager fallback, reported in a note; compiles again once unset) and
//     the disk cache under KILN_CACHE_DIR/cuda (reused by the next process, nothing new
//     stored; corrupt files rebuilt).
// Skipped without a GPU.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "ops/api.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Device gpu() { return kiln::cuda_device(); }
const DType kF32 = DType::Float32;

// Only regions trace here (automatic tracing off), so inputs made between calls never
// form traces of their own and every report holds exactly the traces a test made.
class JitCuda : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    tr::config().jit = true;
    tr::set_enabled(false);
  }
};

// ---------------------------------------------------------------- reports

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_note(const tr::TraceReport& t, const std::string& part) {
  for (const std::string& n : t.notes)
    if (lower(n).find(lower(part)) != std::string::npos) return true;
  return false;
}

// Checks that explain() holds `count` traces, all compiled by the CUDA backend, replayed,
// run as CUDA graphs (a note says so) and, unless allowed, without eager fallbacks. Returns the
// first trace's kernel count (-1 if there is none).
int expect_cuda_traces(size_t count, bool allow_fallback = false) {
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(r.traces.size(), count) << r.table();
  for (const tr::TraceReport& t : r.traces) {
    EXPECT_FALSE(t.stays_eager) << r.table();
    EXPECT_GE(t.replays, 1) << r.table();
    if (allow_fallback) continue;
    EXPECT_EQ(t.backend, "nvrtc") << r.table();
    EXPECT_TRUE(has_note(t, "cuda graph")) << r.table();
    EXPECT_FALSE(has_note(t, "cuda graph off")) << r.table();
    EXPECT_FALSE(has_note(t, "fell back")) << r.table();
  }
  return r.traces.empty() ? -1 : r.traces[0].kernels;
}

// Runs f four times, each call in a region (two warmups, the compile, replays), and
// returns the last result; checks that one CUDA trace compiled.
template <class F>
Tensor traced(F&& f, int* kernels = nullptr, bool allow_fallback = false) {
  Tensor out;
  for (int i = 0; i < 4; ++i) {
    tr::Region region;
    out = f();
  }
  const int k = expect_cuda_traces(1, allow_fallback);
  if (kernels) *kernels = k;
  return out;
}

// ---------------------------------------------------------------- inputs and checks

struct In {
  Host host;
  DType dtype;
  Layout layout = Layout::Contiguous;
};

In in(const Dims& sizes, DType d, Range range = {}, Layout layout = Layout::Contiguous) {
  return In{random_host(sizes, d, range), d, layout};
}

// Values k/8 for k in [-16, 16]: exact in every float dtype, and so are x*2+1, x+1,
// x*-1.5, x*0.5 and x*2; a row of them sums exactly, so low-precision row results differ
// from the reference only by the rounding of the output.
In grid(const Dims& sizes, DType d) {
  Host h(sizes);
  for (double& v : h.v) v = static_cast<double>(uniform_int(-16, 16)) / 8.0;
  return In{h, d};
}

std::vector<Tensor> build(const std::vector<In>& ins, Device device) {
  std::vector<Tensor> out;
  for (const In& i : ins) out.push_back(make(i.host, i.dtype, i.layout, device));
  return out;
}

bool is_16bit(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

// The least precise float dtype among the inputs and the output.
DType lowest_float(const std::vector<In>& ins, DType out) {
  auto rank = [](DType d) {
    return d == DType::BFloat16 ? 0 : d == DType::Float16 ? 1 : d == DType::Float32 ? 2 : 3;
  };
  DType low = is_float(out) ? out : DType::Float64;
  for (const In& i : ins)
    if (is_float(i.dtype) && rank(i.dtype) < rank(low)) low = i.dtype;
  return low;
}

double max_abs(const Host& h) {
  double m = 0;
  for (double v : h.v)
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  return m;
}

// Compares a fused GPU result with the eager GPU and eager CPU results of the same program.
// scale > 0 (16-bit programs): eager rounds after every op and fused code once at the end,
// so near a cancellation they differ by ulps of the operands, not of the result: atol
// grows to scale * the largest reference value.
void expect_same(const Tensor& fused, const Tensor& eager_gpu, const Tensor& eager_cpu, Tol tol,
                 double scale = 0) {
  ASSERT_TRUE(fused.defined());
  EXPECT_TRUE(fused.is_cuda()) << fused.meta_str();
  EXPECT_EQ(fused.dtype(), eager_cpu.dtype()) << fused.meta_str();
  for (const auto& [label, ref] : {std::pair<const char*, Host>{"eager CUDA", read(eager_gpu)},
                                   std::pair<const char*, Host>{"eager CPU", read(eager_cpu)}}) {
    Tol t = tol;
    t.atol = std::max(t.atol, scale * max_abs(ref));
    EXPECT_TRUE(all_close(fused, ref, t)) << "fused vs " << label;
  }
}

// Traces fn on GPU copies of the inputs (4 calls in a region, from a fresh tracer),
// compares with eager GPU and CPU runs, and checks the kernel count when one is given.
// 16-bit values: fused binary ops compute in float32 and round to the storage dtype after
// each op, as eager does (jit/lower.cpp), so a fused 16-bit chain is compared with eager,
// not with the float32 computation rounded once.
int expect_fused(const std::vector<In>& ins, const Fn& fn, Tol tol, int want_kernels = -1) {
  tr::reset();
  const std::vector<Tensor> g = build(ins, gpu()), c = build(ins, kiln::kCPU);
  int kernels = -1;
  const Tensor fused = traced([&] { return fn(g); }, &kernels);
  if (!fused.defined()) return kernels;
  const DType low = lowest_float(ins, fused.dtype());
  expect_same(fused, eager([&] { return fn(g); }), eager([&] { return fn(c); }), tol,
              is_16bit(low) ? tol.rtol : 0.0);
  if (want_kernels >= 0) {
    EXPECT_EQ(kernels, want_kernels) << tr::explain().table();
  }
  return kernels;
}

// Pointwise tolerances: float32 allows the GPU's and the CPU's transcendentals to differ
// in a few ulps; 16-bit types allow for eager's rounding after every op (see expect_same).
Tol pw_tol(DType d) {
  switch (d) {
    case DType::Float32:
      return Tol{2e-5, 2e-5};
    case DType::Float16:
      return Tol{2e-2, 2e-2};
    case DType::BFloat16:
      return Tol{4e-2, 4e-2};
    default:
      return tol_pointwise(d);
  }
}

// Row kernels: the reduction order differs (float32), 16-bit as above.
Tol row_tol(DType d) {
  switch (d) {
    case DType::Float32:
      return Tol{1e-4, 1e-4};
    case DType::Float16:
      return Tol{2e-2, 2e-2};
    default:
      return Tol{4e-2, 4e-2};
  }
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  Range range;
};

// The fusible unary ops (JitUnary's list in test_jit_cpu.cpp, plus both GELUs).
const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return kiln::neg(x); }, {}},
      {"abs", [](const Tensor& x) { return kiln::abs(x); }, {}},
      {"exp", [](const Tensor& x) { return kiln::exp(x); }, {}},
      {"log", [](const Tensor& x) { return kiln::log(x); }, {0.1, 4.0}},
      {"sqrt", [](const Tensor& x) { return kiln::sqrt(x); }, {0.0, 4.0}},
      {"rsqrt", [](const Tensor& x) { return kiln::rsqrt(x); }, {0.1, 4.0}},
      {"sin", [](const Tensor& x) { return kiln::sin(x); }, {-6.0, 6.0}},
      {"cos", [](const Tensor& x) { return kiln::cos(x); }, {-6.0, 6.0}},
      {"tanh", [](const Tensor& x) { return kiln::tanh(x); }, {-5.0, 5.0}},
      {"sigmoid", [](const Tensor& x) { return kiln::sigmoid(x); }, {-8.0, 8.0}},
      {"relu", [](const Tensor& x) { return kiln::relu(x); }, {}},
      {"silu", [](const Tensor& x) { return kiln::silu(x); }, {}},
      {"reciprocal", [](const Tensor& x) { return kiln::reciprocal(x); }, {0.2, 3.0}},
      {"gelu", [](const Tensor& x) { return kiln::gelu(x); }, {-4.0, 4.0}},
      {"gelu_tanh", [](const Tensor& x) { return kiln::gelu(x, true); }, {-4.0, 4.0}},
  };
  return cases;
}

// Restores an environment variable when it goes out of scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string temp_path(const std::string& stem) {
  return std::filesystem::temp_directory_path().string() + "/" + stem + "-" +
         std::to_string(getpid());
}

}  // namespace

// ---------------------------------------------------------------- pointwise

class JitCudaUnary : public JitCuda, public ::testing::WithParamInterface<DType> {};

TEST_P(JitCudaUnary, EveryUnaryOpFusedWithAScalarEpilogue) {
  const DType d = GetParam();
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    expect_fused(
        {in({97, 131}, d, c.range)},
        [&](const std::vector<Tensor>& v) { return c.fn(v[0]) * 1.5 + 0.25; }, pw_tol(d), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(JitCuda, JitCudaUnary,
                         ::testing::Values(DType::Float32, DType::Float16, DType::BFloat16),
                         param_name);

TEST_F(JitCuda, BinaryOpsBroadcastingAndDtypePromotion) {
  struct Case {
    Dims a, b;
    DType da, db;
  };
  const std::vector<Case> cases = {
      {{65, 1}, {1, 33}, kF32, kF32},
      {{8, 13}, {13}, kF32, DType::Float64},
      {{3, 4, 5}, {4, 1}, DType::Int32, kF32},
      {{50, 1}, {1, 70}, DType::Float16, DType::Float16},
      {{33, 17}, {1, 17}, DType::BFloat16, DType::BFloat16},
      {{5, 6}, {6}, DType::Float16, kF32},
  };
  const Range nonzero{-3, 3, -5, 5, true, 0.1};
  for (const Case& c : cases) {
    SCOPED_TRACE(dims_string(c.a) + " " + name(c.da) + " x " + dims_string(c.b) + " " + name(c.db));
    const std::vector<In> ins = {in(c.a, c.da, nonzero), in(c.b, c.db, nonzero)};
    const DType out = promote_types(c.da, c.db);
    expect_fused(
        ins,
        [](const std::vector<Tensor>& v) {
          const Tensor &a = v[0], &b = v[1];
          Tensor s = a + b, p = a * b, m = kiln::maximum(a, b) - kiln::minimum(a, b);
          return (s * p + m) * 0.5 - 2 * s;  // every op of the full shape: one group
        },
        pw_tol(is_float(out) ? out : kF32), 1);
    Tol tol = pw_tol(is_16bit(c.da) ? c.da : out);
    tol.rtol = std::max(tol.rtol, 1e-4);
    tol.atol = std::max(tol.atol, 1e-4);
    expect_fused(
        ins,
        [](const std::vector<Tensor>& v) {
          return v[0] / v[1] + kiln::pow(kiln::abs(v[0]) + 1.0, 1.5);
        },
        tol);
  }
}

TEST_F(JitCuda, ScalarArgumentsChangeOnEveryReplay) {
  for (DType d : {kF32, DType::BFloat16}) {
    SCOPED_TRACE(name(d));
    tr::reset();
    const std::vector<In> ins = {in({129, 1}, d), in({1, 67}, d)};
    const std::vector<Tensor> g = build(ins, gpu()), c = build(ins, kiln::kCPU);
    auto f = [](const std::vector<Tensor>& v, double s) {
      Tensor y = v[0] * s + v[1] / (s + 1.0);  // [129, 67]
      return kiln::softmax(y * (s - 0.25), -1) + kiln::clamp(y, -s, std::nullopt);
    };
    const std::vector<double> scales = {0.5, -1.25, 2.0, 0.0, 3.5, 1.0, -0.75};
    std::vector<Tensor> outs;
    for (double s : scales) {
      tr::Region region;
      outs.push_back(f(g, s));
    }
    expect_cuda_traces(1);  // a new scalar value never recompiles
    for (size_t i = 0; i < scales.size(); ++i) {
      SCOPED_TRACE("call " + std::to_string(i) + ", s = " + std::to_string(scales[i]));
      expect_same(outs[i], eager([&] { return f(g, scales[i]); }),
                  eager([&] { return f(c, scales[i]); }), row_tol(d),
                  d == kF32 ? 0.0 : row_tol(d).rtol);
    }
  }
}

TEST_F(JitCuda, ComparisonsWhereClampPowAndCasts) {
  for (DType d : {kF32, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(name(d));
    // Grid values: ties for == and <=, and sums exact in every dtype.
    const std::vector<In> grid_ins = {grid({41, 29}, d), grid({41, 29}, d), grid({29}, d)};
    const std::vector<In> ins = {in({41, 29}, d), in({41, 29}, d), in({29}, d)};
    {
      SCOPED_TRACE("comparisons and where");
      expect_fused(
          grid_ins,
          [](const std::vector<Tensor>& v) {
            const Tensor &a = v[0], &b = v[1];
            Tensor lt = a < b, ge = a >= b, ne = a != v[2];
            return kiln::where(lt, a * 2.0, b) + kiln::where(ge, 1.0 * a, -1.0 * b) +
                   kiln::where(a <= v[2], a, v[2]) + (a == b).to(kF32) - ne.to(kF32);
          },
          pw_tol(d), 1);
    }
    {
      // A scalar branch is a 0-d `full` of its own: more than one group.
      SCOPED_TRACE("where with scalar branches");
      expect_fused(
          grid_ins,
          [](const std::vector<Tensor>& v) {
            return kiln::where(v[0] <= v[2], v[0], 0.5) + kiln::where(v[0] > v[1], -0.25, v[1]);
          },
          pw_tol(d));
    }
    {
      SCOPED_TRACE("clamp");
      expect_fused(
          ins,
          [](const std::vector<Tensor>& v) {
            return kiln::clamp(kiln::gelu(v[0]) * 2.0, -1.0, 1.5) +
                   kiln::clamp(v[1], std::nullopt, 0.5) +
                   kiln::clamp(v[0] + v[2], -0.5, std::nullopt);
          },
          pw_tol(d), 1);
    }
    {
      SCOPED_TRACE("pow");
      expect_fused(
          ins,
          [](const std::vector<Tensor>& v) {
            Tensor base = kiln::abs(v[0]) + 0.5;
            return kiln::pow(base, 1.5) + kiln::pow(base, v[1]) * 0.25 + kiln::pow(2.0, v[0] * 0.5);
          },
          pw_tol(d), 1);
    }
    {
      SCOPED_TRACE("casts");
      expect_fused(
          ins,
          [](const std::vector<Tensor>& v) {
            const Tensor x = v[0].to(kF32);
            Tensor y = (x * 3).to(DType::Int32).to(kF32) + x.to(DType::Float16).to(kF32) +
                       x.to(DType::BFloat16).to(kF32) * 0.5 + (v[1] > 0).to(kF32) +
                       v[2].to(DType::Float64).to(kF32);
            return (y * 0.5).to(DType::Float16);
          },
          pw_tol(DType::Float16));
    }
  }
}

TEST_F(JitCuda, NonContiguousInputsAndViewsInsideTheTrace) {
  for (DType d : {kF32, DType::BFloat16}) {
    for (Layout layout : {Layout::Transposed, Layout::Stepped, Layout::Offset, Layout::Permuted}) {
      SCOPED_TRACE(name(d) + " " + name(layout));
      const std::vector<In> ins = {in({12, 10, 40}, d, {}, layout), in({12, 10, 40}, d)};
      {
        SCOPED_TRACE("pointwise");
        expect_fused(
            ins,
            [](const std::vector<Tensor>& v) { return kiln::sigmoid(v[0] * 0.75 + v[1]) - v[0]; },
            pw_tol(d));
      }
      {
        SCOPED_TRACE("row");
        expect_fused(
            ins,
            [](const std::vector<Tensor>& v) {
              return kiln::softmax(v[0] * 2.0, -1) + kiln::sum(v[0], {2}, true) * 0.1 +
                     kiln::layer_norm(v[0] + v[1], {40});
            },
            row_tol(d));
      }
    }
    SCOPED_TRACE(name(d) + " views taken in the trace");
    const std::vector<In> ins = {in({24, 40}, d), in({40, 24}, d)};
    expect_fused(
        ins,
        [](const std::vector<Tensor>& v) {
          Tensor stepped = v[0].slice(1, 1, 40, 3);         // [24, 13], step 3
          Tensor rows = kiln::softmax(v[1].t() * 2.0, -1);  // rows of a transpose: [24, 40]
          Tensor every_other = kiln::mean(v[0].slice(1, 0, 40, 2) * 2.0, {1}, true);  // [24, 1]
          return kiln::exp(stepped) * 0.5 + rows.slice(1, 1, 40, 3) + every_other;
        },
        row_tol(d));
  }
}

// ---------------------------------------------------------------- row kernels

class JitCudaRows : public JitCuda, public ::testing::WithParamInterface<DType> {};

TEST_P(JitCudaRows, ReductionsSoftmaxLayerNormAtOddSizes) {
  const DType d = GetParam();
  struct Case {
    const char* name;
    Fn f;
  };
  const std::vector<Case> cases = {
      {"sum(x*2+1)", [](const std::vector<Tensor>& v) { return kiln::sum(v[0] * 2 + 1, {1}); }},
      {"mean keepdim",
       [](const std::vector<Tensor>& v) { return kiln::mean(v[0] - 0.5, {1}, true) * 3; }},
      {"amax", [](const std::vector<Tensor>& v) { return kiln::amax(v[0] * -1.5, {1}) + 1; }},
      {"var",
       [](const std::vector<Tensor>& v) {
         return kiln::var(v[0] + 1, {1}, v[0].size(1) > 1 ? 1 : 0, true) + 0.5;
       }},
      {"softmax", [](const std::vector<Tensor>& v) { return kiln::softmax(v[0] * 0.5, -1); }},
      {"log_softmax", [](const std::vector<Tensor>& v) { return kiln::log_softmax(v[0] * 2, -1); }},
      {"layer_norm",
       [](const std::vector<Tensor>& v) {
         return kiln::layer_norm(v[0] + 1, {v[0].size(1)}, v[1], v[2]);
       }},
  };
  for (int64_t rows : {1, 3000}) {
    for (int64_t cols : {1, 7, 1000, 4096}) {
      const std::vector<In> ins = {grid({rows, cols}, d), in({cols}, d), in({cols}, d)};
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.name) + " " + dims_string({rows, cols}));
        expect_fused(ins, c.f, row_tol(d), 1);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(JitCuda, JitCudaRows,
                         ::testing::Values(DType::Float32, DType::Float16, DType::BFloat16),
                         param_name);

TEST_F(JitCuda, SeedExamplesAreOneKernelEach) {
  const std::vector<In> ins = {in({64, 256}, kF32), in({256}, kF32), in({256}, kF32)};
  const std::vector<std::pair<const char*, Fn>> cases = {
      {"gelu written out",
       [](const std::vector<Tensor>& v) {
         const Tensor& x = v[0];
         return 0.5 * x * (1 + kiln::tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
       }},
      {"softmax written out",
       [](const std::vector<Tensor>& v) {
         Tensor e = kiln::exp(v[0] - kiln::amax(v[0], {1}, true));
         return e / kiln::sum(e, {1}, true);
       }},
      {"layernorm written out",
       [](const std::vector<Tensor>& v) {
         const Tensor& x = v[0];
         Tensor mu = kiln::mean(x, {1}, true);
         Tensor var = kiln::mean((x - mu) * (x - mu), {1}, true);
         return (x - mu) / kiln::sqrt(var + 1e-5) * v[1] + v[2];
       }},
      {"layer_norm op",
       [](const std::vector<Tensor>& v) { return kiln::layer_norm(v[0] + 1, {256}, v[1], v[2]); }},
  };
  for (const auto& [label, f] : cases) {
    SCOPED_TRACE(label);
    expect_fused(ins, f, Tol{2e-5, 2e-5}, 1);
  }
}

// ---------------------------------------------------------------- graph replay

TEST_F(JitCuda, NewInputTensorsEveryCallAndEveryOutputKept) {
  const Dims shape{257, 130};
  std::vector<Host> hosts;
  std::vector<Tensor> inputs, sums, mixes, held;
  const int calls = 6;
  for (int i = 0; i < calls; ++i) {
    hosts.push_back(random_host(shape, kF32));
    inputs.push_back(make(hosts.back(), kF32, gpu()));  // a new pointer on every call
    const Tensor& x = inputs.back();
    const double s = 0.5 + 0.3 * i;
    tr::Region region;
    Tensor e = kiln::exp(x * 0.5);  // held by the caller only from call 4 on
    sums.push_back(kiln::sum(x * 2 + 1, {1}));
    mixes.push_back(kiln::softmax(x * s, -1) + e * 0.25 - kiln::tanh(x));
    if (i >= 4) held.push_back(e);
  }
  const tr::ExplainReport r = tr::explain();
  expect_cuda_traces(1);
  ASSERT_FALSE(r.traces.empty());
  EXPECT_GE(r.traces[0].replays, 3) << r.table();
  for (int i = 0; i < calls; ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    const Tensor& xg = inputs[static_cast<size_t>(i)];
    const Tensor xc = make(hosts[static_cast<size_t>(i)], kF32);
    const double s = 0.5 + 0.3 * i;
    expect_same(sums[static_cast<size_t>(i)], eager([&] { return kiln::sum(xg * 2 + 1, {1}); }),
                eager([&] { return kiln::sum(xc * 2 + 1, {1}); }), row_tol(kF32));
    auto mix = [&](const Tensor& x) {
      return kiln::softmax(x * s, -1) + kiln::exp(x * 0.5) * 0.25 - kiln::tanh(x);
    };
    expect_same(mixes[static_cast<size_t>(i)], eager([&] { return mix(xg); }),
                eager([&] { return mix(xc); }), Tol{2e-5, 2e-5});
    if (i >= 4) {
      expect_same(held[static_cast<size_t>(i - 4)], eager([&] { return kiln::exp(xg * 0.5); }),
                  eager([&] { return kiln::exp(xc * 0.5); }), pw_tol(kF32));
    }
  }
}

// A training loop hands in a new batch at a new address every step (get_batch: randint,
// stack, .to(device)). The library calls that read it (the embedding lookup, the first
// matmul) must not switch the graph off: after one re-capture they read the moving inputs
// from staging buffers that copy nodes fill.
int64_t note_count(const tr::TraceReport& t, const std::string& after) {
  for (const std::string& n : t.notes) {
    const size_t at = n.find(after);
    if (at == std::string::npos) continue;
    size_t b = at;  // the number right before `after`
    while (b > 0 && std::isdigit(static_cast<unsigned char>(n[b - 1]))) --b;
    return std::stoll(n.substr(b, at - b));
  }
  return -1;
}

TEST_F(JitCuda, NewBatchAddressEveryStepKeepsTheGraph) {
  const int64_t vocab = 50, width = 24, tokens = 40;
  const Host wh = random_host({vocab, width}, kF32), ph = random_host({width, 16}, kF32);
  const Tensor wg = make(wh, kF32, gpu()), pg = make(ph, kF32, gpu());
  const Tensor wc = make(wh, kF32), pc = make(ph, kF32);
  auto step = [](const Tensor& w, const Tensor& p, const Tensor& idx, const Tensor& x) {
    // The index arrives on the host (a new tensor each call) and moves to the GPU inside
    // the trace: a library call reading a host tensor, never staged.
    Tensor e = kiln::embedding(w, idx.to(w.device()));  // a library call on the moving index
    Tensor h = kiln::matmul(kiln::tanh(e) + x, p);      // a matmul fed by the moving batch too
    return kiln::softmax(kiln::matmul(x, p) * 0.5 + h, -1);
  };
  Range ids;
  ids.ilo = 0;
  ids.ihi = vocab - 1;
  const int calls = 9;
  for (int i = 0; i < calls; ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    const Host ih = random_host({tokens}, DType::Int64, ids),
               xh = random_host({tokens, width}, kF32);
    // New addresses every call; the batch arrives as a strided (transposed) view.
    const Tensor ig = make(ih, DType::Int64);
    const Tensor xg = make(xh, kF32, Layout::Transposed, gpu());
    Tensor y;
    {
      tr::Region region;
      y = step(wg, pg, ig, xg);
    }
    expect_same(y, eager([&] { return step(wg, pg, ig, xg); }),
                eager([&] { return step(wc, pc, make(ih, DType::Int64), make(xh, kF32)); }),
                Tol{1e-4, 1e-4});
  }
  const tr::ExplainReport r = tr::explain();
  expect_cuda_traces(1);
  ASSERT_FALSE(r.traces.empty());
  const tr::TraceReport& t = r.traces[0];
  EXPECT_GE(t.replays, 5) << r.table();
  EXPECT_TRUE(has_note(t, "copied into staging buffers")) << r.table();
  const int64_t recaptures = note_count(t, " re-capture(s)");
  EXPECT_GE(recaptures, 0) << r.table();
  EXPECT_LE(recaptures, 1) << r.table();
}

// A batch built on the host inside the trace (nanoGPT's get_batch: host index arithmetic,
// a cat of host rows, then .to(device)) does not send the whole trace to the interpreter:
// the host-side ops run on the CPU before each launch, the rest is fused and captured.
TEST_F(JitCuda, HostSideOpsInsideAGpuTraceRunBeforeTheLaunch) {
  const int64_t vocab = 37, width = 16, rows = 4, cols = 8;
  const Host wh = random_host({vocab, width}, kF32);
  const Tensor wg = make(wh, kF32, gpu()), wc = make(wh, kF32);
  auto step = [&](const Tensor& w, const std::vector<Tensor>& parts, const Tensor& x) {
    // host-side: shift the indices, join the rows; then the copy in
    Tensor idx = kiln::cat(parts, 0) + int64_t{3};
    Tensor e = kiln::embedding(w, idx.to(w.device()));
    return kiln::softmax(kiln::tanh(e) * 0.5 + x, -1);
  };
  Range ids;
  ids.ilo = 0;
  ids.ihi = vocab - 4;
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    std::vector<Host> ph;
    for (int r = 0; r < rows; ++r) ph.push_back(random_host({1, cols}, DType::Int64, ids));
    const Host xh = random_host({rows, cols, width}, kF32);
    auto parts = [&] {
      std::vector<Tensor> p;
      for (const Host& h : ph) p.push_back(make(h, DType::Int64));
      return p;
    };
    const std::vector<Tensor> pg = parts();
    const Tensor xg = make(xh, kF32, gpu());
    Tensor y;
    {
      tr::Region region;
      y = step(wg, pg, xg);
    }
    expect_same(y, eager([&] { return step(wg, pg, xg); }),
                eager([&] { return step(wc, parts(), make(xh, kF32)); }), Tol{1e-5, 1e-5});
  }
  expect_cuda_traces(1);
  const tr::ExplainReport r = tr::explain();
  ASSERT_FALSE(r.traces.empty());
  EXPECT_TRUE(has_note(r.traces[0], "host-side op(s) run on the CPU before each launch"))
      << r.table();
  EXPECT_TRUE(has_note(r.traces[0], "copied in before each launch")) << r.table();
}

// Dropout inside a CUDA trace: rand is fused (KOp::Random), its seed and offset are
// kernel arguments patched per replay, so the graph is never re-captured, and every
// replay draws what eager CUDA and eager CPU draw from the same generator state.
TEST_F(JitCuda, DropoutFusedGraphKeptAndDrawsAsEager) {
  const Host xh = random_host({64, 300}, kF32);
  const Tensor xg = make(xh, kF32, gpu()), xc = make(xh, kF32);
  auto f = [](const Tensor& x) {
    const Tensor keep =
        kiln::ge(kiln::rand(x.sizes(), kiln::TensorOptions(x.dtype(), x.device())), 0.25);
    return kiln::where(keep, kiln::tanh(x) * (1.0 / 0.75), 0.0) +
           kiln::randn(x.sizes(), kiln::TensorOptions(x.dtype(), x.device())) * 0.01;
  };
  for (int c = 0; c < 8; ++c) {
    SCOPED_TRACE("call " + std::to_string(c));
    kiln::manual_seed(40 + static_cast<uint64_t>(c));
    Tensor y;
    {
      tr::Region region;
      y = f(xg);
    }
    kiln::manual_seed(40 + static_cast<uint64_t>(c));
    const Tensor yg = eager([&] { return f(xg); });
    kiln::manual_seed(40 + static_cast<uint64_t>(c));
    const Tensor yc = eager([&] { return f(xc); });
    expect_same(y, yg, yc, Tol{2e-6, 2e-6});
  }
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(expect_cuda_traces(1), 1) << r.table();
  ASSERT_FALSE(r.traces.empty());
  EXPECT_EQ(note_count(r.traces[0], " re-capture(s)"), 0) << r.table();
}

// A trace on cuda:1 while the thread keeps cuda:0 current (a DDP rank that never calls
// cudaSetDevice): a new input and a new scalar on every call patch the captured graph's
// kernel nodes, which must resolve on the trace's own device. Before the plan held a
// DeviceScope, the first patch failed: "kernel node update: cudaErrorInvalidValue".
// Needs two GPUs.
TEST_F(JitCuda, TraceOnTheSecondGpuWithTheFirstCurrent) {
  if (kiln::cuda_context::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const Device second = kiln::cuda_device(1);
  const Host bh = random_host({1, 77}, kF32);
  const Tensor bg = make(bh, kF32, second), bc = make(bh, kF32);
  auto f = [](const Tensor& x, const Tensor& b, double s) {
    return kiln::softmax(x * s + b, -1) * kiln::tanh(x - s);
  };
  for (int c = 0; c < 7; ++c) {
    SCOPED_TRACE("call " + std::to_string(c));
    const double s = 0.25 + 0.5 * c;
    const Host xh = random_host({33, 77}, kF32);
    const Tensor xg = make(xh, kF32, second);  // a new address every call
    Tensor y;
    {
      tr::Region region;
      y = f(xg, bg, s);
    }
    EXPECT_EQ(y.device(), second);
    expect_same(y, eager([&] { return f(xg, bg, s); }),
                eager([&] { return f(make(xh, kF32), bc, s); }), Tol{2e-6, 2e-6});
  }
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(expect_cuda_traces(1), 1) << r.table();
  ASSERT_FALSE(r.traces.empty());
  EXPECT_GE(note_count(r.traces[0], " kernel-node and"), 1) << r.table();
}

TEST_F(JitCuda, BatchSizeChangeAfterCompiling) {
  const Host bh = random_host({96}, kF32);
  const Tensor bg = make(bh, kF32, gpu()), bc = make(bh, kF32);
  auto f = [](const Tensor& x, const Tensor& b) {
    return kiln::softmax(x * 2.0, -1) * kiln::sigmoid(x + b) + kiln::mean(x, {1}, true);
  };
  int phase = 0;
  for (int64_t batch : {64, 128, 64}) {
    SCOPED_TRACE("batch " + std::to_string(batch) + " (phase " + std::to_string(phase) + ")");
    for (int i = 0; i < 5; ++i) {
      const Host h = random_host({batch, 96}, kF32);
      const Tensor xg = make(h, kF32, gpu()), xc = make(h, kF32);
      Tensor y;
      {
        tr::Region region;
        y = f(xg, bg);
      }
      expect_same(y, eager([&] { return f(xg, bg); }), eager([&] { return f(xc, bc); }),
                  row_tol(kF32));
    }
    const tr::ExplainReport r = tr::explain();
    if (phase == 0) {
      EXPECT_EQ(r.traces.size(), 1u) << r.table();
    }
    if (phase >= 1) {  // the new shape is a new trace, or a recompile of the first
      EXPECT_TRUE(r.traces.size() >= 2 || !r.recompiles.empty()) << r.table();
    }
    for (const tr::TraceReport& t : r.traces) {
      EXPECT_EQ(t.backend, "nvrtc") << r.table();
      EXPECT_FALSE(has_note(t, "fell back")) << r.table();
    }
    ++phase;
  }
  int64_t replays = 0;
  for (const tr::TraceReport& t : tr::explain().traces) replays += t.replays;
  EXPECT_GE(replays, 3) << tr::explain().table();
}

TEST_F(JitCuda, InPlaceOptimizerStepReplayed) {
  const Dims shape{64, 33};
  const Host w0 = random_host(shape, kF32);
  // The same state on three sides: traced on the GPU, eager on the GPU, eager on the CPU.
  Tensor w = make(w0, kF32, gpu()), m = kiln::zeros(shape, kiln::TensorOptions(kF32, gpu()));
  Tensor we = make(w0, kF32, gpu()), me = kiln::zeros(shape, kiln::TensorOptions(kF32, gpu()));
  Tensor wc = make(w0, kF32), mc = kiln::zeros(shape);
  auto step = [](Tensor& weight, Tensor& momentum, const Tensor& x, double lr) {
    Tensor g = kiln::tanh(x * weight) * x;
    momentum.mul_(0.9).add_(g);
    weight.add_(momentum * -lr);
  };
  for (int i = 0; i < 8; ++i) {
    const Host xh = random_host(shape, kF32);
    const Tensor xg = make(xh, kF32, gpu()), xc = make(xh, kF32);
    const double lr = 0.1 / (i + 1);
    {
      tr::Region region;
      step(w, m, xg, lr);
    }
    eager([&] {
      step(we, me, xg, lr);
      step(wc, mc, xc, lr);
      return 0;
    });
  }
  expect_cuda_traces(1);
  const Tol tol{1e-4, 1e-5};
  EXPECT_TRUE(all_close(w, read(we), tol)) << "w vs eager CUDA";
  EXPECT_TRUE(all_close(w, read(wc), tol)) << "w vs eager CPU";
  EXPECT_TRUE(all_close(m, read(mc), tol)) << "momentum vs eager CPU";
}

// A value a library call computes (a factory, cat, pooling, argmax) reaches the user
// through a copy out of a staging buffer; a later in-place write into it inside the same
// trace must be in what the user gets (found by kiln_fuzz's CUDA legs: the copy ran right
// after the call, so `empty(...).fill_(x)` handed out uninitialized memory).
TEST_F(JitCuda, InPlaceWritesIntoEscapingLibraryValuesAreKept) {
  const Tol tol{1e-5, 1e-5};
  const std::vector<In> ins = {in({6, 5}, kF32), in({3, 5}, kF32), in({2, 3, 7, 8}, kF32)};
  expect_fused(
      ins,
      [](const std::vector<Tensor>& g) {
        Tensor e = kiln::empty({6, 5}, kiln::TensorOptions(kF32, g[0].device()));
        e.fill_(1.5);
        e.add_(g[0]);
        return e;
      },
      tol);
  expect_fused(
      ins,
      [](const std::vector<Tensor>& g) {
        Tensor c = kiln::cat({g[0], g[1]}, 0);
        c.mul_(2.0);
        return c;
      },
      tol);
  expect_fused(
      ins,
      [](const std::vector<Tensor>& g) {
        Tensor p = kiln::avg_pool2d(g[2], {2, 2});
        p.clamp_(-0.1, 0.2);
        return p;
      },
      tol);
  expect_fused(
      ins,
      [](const std::vector<Tensor>& g) {
        Tensor a = kiln::argmax(g[0], 1, false);
        a.fill_(5);
        return a;
      },
      Tol{0, 0});
}

// An in-place write into a tensor the trace reads, fused into a row kernel (here next to
// a softmax over the same rows): the store must reach memory, not the kernel's register
// copy of the operand (found by kiln_fuzz's CUDA legs: `v0.add_(v0)` beside a var()).
TEST_F(JitCuda, InPlaceStoreFusedIntoARowKernel) {
  for (const int64_t cols : {5, 300, 5000}) {  // warp, block-cached and block-streamed rows
    SCOPED_TRACE("cols " + std::to_string(cols));
    tr::reset();
    const Dims shape{7, cols};
    const Host w0 = random_host(shape, kF32), xh = random_host(shape, kF32);
    Tensor w = make(w0, kF32, gpu()), we = make(w0, kF32, gpu()), wc = make(w0, kF32);
    const Tensor xg = make(xh, kF32, gpu()), xc = make(xh, kF32);
    Tensor sm, sme, smc;
    auto step = [](Tensor& weight, const Tensor& x, double s) {
      Tensor out = kiln::softmax(x * s, -1);
      weight.add_(weight * 0.5 + out);
      return out;
    };
    for (int i = 0; i < 6; ++i) {
      const double s = 0.5 + 0.25 * i;
      {
        tr::Region region;
        sm = step(w, xg, s);
      }
      eager([&] {
        sme = step(we, xg, s);
        smc = step(wc, xc, s);
        return 0;
      });
    }
    expect_cuda_traces(1);
    const Tol tol{1e-5, 1e-6};
    EXPECT_TRUE(all_close(w, read(we), tol)) << "w vs eager CUDA";
    EXPECT_TRUE(all_close(w, read(wc), tol)) << "w vs eager CPU";
    EXPECT_TRUE(all_close(sm, read(smc), tol)) << "softmax vs eager CPU";
  }
}

// ---------------------------------------------------------------- library calls

TEST_F(JitCuda, MlpMatmulsWithFusedEpilogues) {
  const Tol tol{1e-4, 1e-3};
  {
    SCOPED_TRACE("relu(x @ w1 + b1) @ w2 + b2: 2 cuBLASLt GEMMs (RELU_BIAS, BIAS), no kernel");
    const std::vector<In> ins = {in({32, 48}, kF32), in({48, 64}, kF32), in({64}, kF32),
                                 in({64, 16}, kF32), in({16}, kF32)};
    const int kernels = expect_fused(
        ins,
        [](const std::vector<Tensor>& v) {
          Tensor h = kiln::relu(kiln::matmul(v[0], v[1]) + v[2]);
          return kiln::matmul(h, v[3]) + v[4];
        },
        tol, 2);
    RecordProperty("mlp_matmul_kernels", kernels);
    const std::vector<std::string> notes = tr::explain().traces.at(0).notes;
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return n.find("RELU_BIAS epilogue") != std::string::npos;
    })) << tr::explain().table();
  }
  {
    SCOPED_TRACE("gelu_tanh(x @ w + b) in 16 bits: one GEMM with the GELU_BIAS epilogue");
    for (DType d : {DType::Float16, DType::BFloat16}) {
      const std::vector<In> ins = {in({64, 32}, d, {-0.5, 0.5}), in({32, 128}, d, {-0.5, 0.5}),
                                   in({128}, d)};
      expect_fused(
          ins,
          [](const std::vector<Tensor>& v) {
            return kiln::gelu(kiln::matmul(v[0], v[1]) + v[2], true);
          },
          pw_tol(d), 1);
    }
  }
  {
    SCOPED_TRACE("the pre-activation is held too: BIAS epilogue, relu stays a kernel");
    const std::vector<In> ins = {in({40, 24}, kF32), in({24, 56}, kF32), in({1, 56}, kF32)};
    const auto g = build(ins, gpu());
    tr::reset();
    Tensor pre, post;
    for (int i = 0; i < 4; ++i) {
      tr::Region region;
      pre = kiln::matmul(g[0], g[1]) + g[2];
      post = kiln::relu(pre) * 2.0;
    }
    const Tensor want_pre = eager([&] { return kiln::matmul(g[0], g[1]) + g[2]; });
    EXPECT_TRUE(all_close(pre, read(want_pre), tol));
    EXPECT_TRUE(all_close(post, read(eager([&] { return kiln::relu(want_pre) * 2.0; })), tol));
    expect_cuda_traces(1);
  }
  {
    SCOPED_TRACE("softmax(linear(relu(linear(x)))): 2 library calls, 2 fused kernels");
    const std::vector<In> ins = {in({32, 48}, kF32), in({64, 48}, kF32), in({64}, kF32),
                                 in({16, 64}, kF32), in({16}, kF32)};
    const int kernels = expect_fused(
        ins,
        [](const std::vector<Tensor>& v) {
          Tensor h = kiln::relu(kiln::linear(v[0], v[1], v[2]));
          return kiln::softmax(kiln::linear(h, v[3], v[4]) * 0.5, -1);
        },
        tol, 4);
    RecordProperty("mlp_linear_kernels", kernels);
  }
}

// ---------------------------------------------------------------- passes off (KILN_JIT_DISABLE)

class JitCudaPassOff : public JitCuda, public ::testing::WithParamInterface<std::string> {};

TEST_P(JitCudaPassOff, FusedResultsEqualEager) {
  tr::config().jit_disable = {GetParam()};
  const Tol tol{1e-4, 1e-3};
  const std::vector<In> ins = {in({32, 48}, kF32), in({48, 64}, kF32), in({64}, kF32),
                               in({64, 16}, kF32), in({16}, kF32),     in({32, 16}, kF32)};
  expect_fused(
      ins,
      [](const std::vector<Tensor>& v) {
        Tensor h = kiln::relu(kiln::matmul(v[0], v[1]) + v[2]);
        Tensor s = kiln::softmax(kiln::matmul(h, v[3]) + v[4], -1);
        return s * kiln::exp(v[5] * 0.5) + kiln::exp(v[5] * 0.5) - kiln::sum(s, {1}, true);
      },
      tol);
  EXPECT_TRUE(
      has_note(tr::explain().traces.at(0), "passes switched off (KILN_JIT_DISABLE): " + GetParam()))
      << tr::explain().table();
}

INSTANTIATE_TEST_SUITE_P(JitCuda, JitCudaPassOff,
                         ::testing::Values("cse", "dce", "fuse", "attention", "epilogue",
                                           "simplify"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_F(JitCuda, FuseOffIsOneKernelPerOpAndEpilogueOffKeepsTheBiasInAKernel) {
  const Tol tol{1e-4, 1e-3};
  const std::vector<In> rows = {in({32, 48}, kF32), in({32, 48}, kF32)};
  const Fn f = [](const std::vector<Tensor>& v) {
    return kiln::softmax(v[0] * 2.0 + v[1], -1) - kiln::tanh(v[1]);
  };
  EXPECT_EQ(expect_fused(rows, f, tol), 1);
  tr::config().jit_disable = {"fuse"};
  const int unfused = expect_fused(rows, f, tol);
  EXPECT_EQ(unfused, static_cast<int>(tr::explain().traces.at(0).ops.size()))
      << tr::explain().table();
  EXPECT_GE(unfused, 5);

  const std::vector<In> mlp_ins = {in({32, 48}, kF32), in({48, 64}, kF32), in({64}, kF32)};
  const Fn mlp = [](const std::vector<Tensor>& v) {
    return kiln::relu(kiln::matmul(v[0], v[1]) + v[2]);
  };
  tr::config().jit_disable.clear();
  EXPECT_EQ(expect_fused(mlp_ins, mlp, tol), 1);  // one GEMM with the RELU_BIAS epilogue
  EXPECT_TRUE(has_note(tr::explain().traces.at(0), "RELU_BIAS epilogue")) << tr::explain().table();
  tr::config().jit_disable = {"epilogue"};
  EXPECT_EQ(expect_fused(mlp_ins, mlp, tol), 2);  // the matmul, then add + relu fused
  EXPECT_FALSE(has_note(tr::explain().traces.at(0), "cuBLASLt")) << tr::explain().table();
}

// ---------------------------------------------------------------- failures

TEST_F(JitCuda, OutOfMemoryInATracedLoopAndTheRuntimeAfterIt) {
  // Every call returns a new 4 GiB tensor (broadcasting two small inputs) and the caller
  // keeps them all: device memory runs out after some replays, inside the compiled trace.
  const int64_t n = int64_t{1} << 15;
  const Host col = random_host({n, 1}, kF32), row = random_host({1, n}, kF32);
  const Tensor cg = make(col, kF32, gpu()), rg = make(row, kF32, gpu());
  const size_t before = kiln::cuda_context::allocated_bytes(0);
  auto f = [&](double s) { return cg * s + rg; };
  // A sample of the output (every 4099th row) against values computed here.
  auto sample_ok = [&](const Tensor& y, double s) {
    const int64_t step = 4099;
    const Host got = read(y.slice(0, 0, n, step));
    Host want(got.sizes);
    for (int64_t r = 0; r < got.sizes[0]; ++r) {
      const float c = static_cast<float>(col.v[static_cast<size_t>(r * step)]);
      for (int64_t j = 0; j < n; ++j) {
        want.v[static_cast<size_t>(r * n + j)] =
            c * static_cast<float>(s) + static_cast<float>(row.v[static_cast<size_t>(j)]);
      }
    }
    return all_close(got, want, Tol{1e-5, 1e-6});
  };
  std::vector<Tensor> kept;
  std::vector<double> scales;
  std::string error;
  for (int i = 0; i < 128 && error.empty(); ++i) {
    const double s = 0.5 + 0.25 * i;
    try {
      Tensor y;
      {
        tr::Region region;
        y = f(s);
      }  // the replay runs here at the latest
      kept.push_back(y);
      scales.push_back(s);
    } catch (const kiln::OutOfMemoryError& e) {
      error = e.what();
    }
  }
  ASSERT_FALSE(error.empty()) << "no OutOfMemoryError after " << kept.size() << " x 4 GiB";
  ASSERT_GE(kept.size(), 4u) << "the error should come in a replay, not while recording";
  expect_cuda_traces(1);
  // What earlier calls handed out is intact.
  EXPECT_TRUE(sample_ok(kept.front(), scales.front()));
  EXPECT_TRUE(sample_ok(kept.back(), scales.back()));
  kept.clear();
  // The same trace replays again once there is memory.
  {
    Tensor y;
    {
      tr::Region region;
      y = f(-1.5);
    }
    EXPECT_TRUE(sample_ok(y, -1.5));
  }
  tr::reset();
  EXPECT_LE(kiln::cuda_context::allocated_bytes(0), before + (size_t{1} << 30))
      << "device memory leaked after the failure";
  // The region the error left ended with it: with tracing off, nothing is recorded (an
  // open region would keep recording).
  (void)kiln::exp(cg * 2.0);
  EXPECT_EQ(tr::explain().ops_recorded, 0) << "a region stayed open after the error";
  // A new small traced computation is right.
  expect_fused(
      {in({300, 70}, kF32), in({70}, kF32)},
      [](const std::vector<Tensor>& v) {
        return kiln::layer_norm(v[0] * 2.0, {70}, v[1]) + kiln::exp(v[0]);
      },
      row_tol(kF32), 1);
}

// ---------------------------------------------------------------- kernel identity

// The trace note "nvrtc: K kernel(s), D different: R loaded already, F from disk, C
// compiled [as P program(s) on T thread(s) ...]" (CudaKernels::summary); -1s if none.
struct NvrtcNote {
  int kernels = -1, different = -1, reused = -1, from_disk = -1, compiled = -1;
  int programs = 0, threads = 0;
};
NvrtcNote nvrtc_note(const tr::TraceReport& t) {
  for (const std::string& n : t.notes) {
    NvrtcNote x;
    if (std::sscanf(n.c_str(),
                    "nvrtc: %d kernel(s), %d different: %d loaded already, %d from disk, %d "
                    "compiled as %d program(s) on %d thread(s)",
                    &x.kernels, &x.different, &x.reused, &x.from_disk, &x.compiled, &x.programs,
                    &x.threads) >= 5)
      return x;
  }
  return {};
}

// Six layers tanh(h @ w_l) * 0.5 + 0.25 of one shape: six kernels of one definition, so
// one kernel loaded (compiled, or from disk) for all six; a second trace with the same
// layer in it reuses that kernel, loaded already in this process.
TEST_F(JitCuda, IdenticalLayersShareOneKernel) {
  std::vector<In> ins = {in({64, 32}, kF32)};
  for (int l = 0; l < 6; ++l) ins.push_back(in({32, 32}, kF32, {-0.3, 0.3}));
  const Fn six = [](const std::vector<Tensor>& v) {
    Tensor h = v[0];
    for (size_t l = 1; l < v.size(); ++l) h = kiln::tanh(kiln::matmul(h, v[l])) * 0.5 + 0.25;
    return h;
  };
  expect_fused(ins, six, Tol{1e-4, 1e-4});
  const tr::ExplainReport r = tr::explain();
  ASSERT_EQ(r.traces.size(), 1u) << r.table();
  const NvrtcNote a = nvrtc_note(r.traces[0]);
  EXPECT_GE(a.kernels, 6) << r.table();  // NVRTC kernels (the matmuls are library steps)
  EXPECT_LE(a.different, a.kernels - 5) << r.table();
  EXPECT_EQ(a.reused + a.from_disk + a.compiled, a.different) << r.table();

  ins.resize(3);  // two layers, then another kernel
  const Fn two = [&](const std::vector<Tensor>& v) { return kiln::exp(six(v) * -1.0); };
  expect_fused(ins, two, Tol{1e-4, 1e-4});
  const tr::ExplainReport r2 = tr::explain();
  ASSERT_EQ(r2.traces.size(), 1u) << r2.table();
  const NvrtcNote b = nvrtc_note(r2.traces[0]);
  EXPECT_GE(b.reused, 1) << r2.table();  // the layer's kernel
  EXPECT_EQ(b.reused + b.from_disk + b.compiled, b.different) << r2.table();
}

// ---------------------------------------------------------------- in a process of its own
// The NVRTC compiler keeps kernels in memory and on disk (KILN_CACHE_DIR, read once per
// process), and KILN_CUDA_JIT_FAIL only stops real compiles: these tests run their body
// in a child process with a fresh cache directory, so every kernel is compiled there.

namespace {

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs JitCudaChild.<test> in a new process with this cache directory and expects it to
// pass and to have run to its end (it writes "done"); shows its output otherwise.
void expect_child_passes(const std::string& test, const std::string& cache_dir) {
  const std::string out = cache_dir + ".out", log = cache_dir + ".log";
  std::filesystem::remove(out);
  const std::string cmd = "KILN_COMPILE_SYNC=1 KILN_CACHE_DIR='" + cache_dir +
                          "' KILN_JIT_CUDA_CHILD_OUT='" + out + "' '" + self_exe() +
                          "' --gtest_filter=JitCudaChild." + test + " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::string output = slurp(log);
  if (output.size() > 6000) output = "..." + output.substr(output.size() - 6000);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(slurp(out), "done\n") << output;
  std::filesystem::remove(out);
  std::filesystem::remove(log);
}

// Path -> size of every file under dir.
std::map<std::string, uintmax_t> files_in(const std::string& dir) {
  std::map<std::string, uintmax_t> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().string()] = e.file_size();
  return out;
}

// The bodies: skipped unless started by expect_child_passes.
class JitCudaChild : public JitCuda {
 protected:
  void SetUp() override {
    JitCuda::SetUp();
    if (!std::getenv("KILN_JIT_CUDA_CHILD_OUT")) GTEST_SKIP() << "runs as a child process";
  }
  void TearDown() override {
    const char* out = std::getenv("KILN_JIT_CUDA_CHILD_OUT");
    if (out && !IsSkipped() && !HasFailure()) std::ofstream(out) << "done\n";
    JitCuda::TearDown();
  }
};

}  // namespace

TEST_F(JitCudaChild, FallbackWhenCompilesFail) {
  // Fused groups on both sides of a library call.
  const std::vector<In> ins = {in({45, 23}, kF32), in({45, 23}, kF32), in({23, 9}, kF32)};
  const Fn f = [](const std::vector<Tensor>& v) {
    Tensor a = kiln::log_softmax(kiln::rsqrt(kiln::abs(v[0]) + 2.0) * v[1], -1);
    Tensor b = kiln::matmul(a, v[2]);
    return kiln::cos(b) * 0.5 + kiln::sigmoid(b) - kiln::silu(b) * 0.125;
  };
  const std::vector<Tensor> g = build(ins, gpu()), c = build(ins, kiln::kCPU);
  const Tensor eg = eager([&] { return f(g); }), ec = eager([&] { return f(c); });
  const Tol tol{1e-4, 1e-4};
  {
    ScopedEnv fail("KILN_CUDA_JIT_FAIL", "1");
    tr::reset();
    expect_same(traced([&] { return f(g); }, nullptr, /*allow_fallback=*/true), eg, ec, tol);
    const tr::ExplainReport r = tr::explain();
    ASSERT_EQ(r.traces.size(), 1u) << r.table();
    EXPECT_EQ(r.traces[0].backend, "nvrtc") << r.table();
    EXPECT_TRUE(has_note(r.traces[0], "fell back to eager")) << r.table();
  }
  // Without the variable the same program compiles (nothing failed was cached).
  tr::reset();
  expect_same(traced([&] { return f(g); }), eg, ec, tol);
}

TEST_F(JitCudaChild, CompileAndReplay) {
  const std::vector<In> ins = {in({300, 77}, kF32)};
  expect_fused(
      ins,
      [](const std::vector<Tensor>& v) {
        return kiln::softmax(v[0] * 2.0, -1) + kiln::tanh(v[0]) * 0.5;
      },
      Tol{2e-5, 2e-5}, 1);
}

// Twelve different kernels (a different op after each matmul) compiled on 2 threads as 2
// programs; the same program traced again finds all twelve loaded.
TEST_F(JitCudaChild, ParallelCompileOnTwoThreads) {
  ScopedEnv threads("KILN_NVRTC_THREADS", "2");
  std::vector<In> ins = {in({40, 24}, kF32)};
  for (int l = 0; l < 12; ++l) ins.push_back(in({24, 24}, kF32, {-0.3, 0.3}));
  const Fn f = [](const std::vector<Tensor>& v) {
    using U = Tensor (*)(const Tensor&);
    const U ops[] = {kiln::tanh, kiln::sigmoid, kiln::sin, kiln::cos, kiln::abs, kiln::erf};
    Tensor h = v[0];
    for (size_t l = 1; l < v.size(); ++l) {
      h = ops[(l - 1) % 6](kiln::matmul(h, v[l]));
      h = l <= 6 ? h * 0.5 : h + 0.125;
    }
    return h;
  };
  for (int round = 0; round < 2; ++round) {
    expect_fused(ins, f, Tol{1e-4, 1e-4});
    const tr::ExplainReport r = tr::explain();
    ASSERT_EQ(r.traces.size(), 1u) << r.table();
    const NvrtcNote n = nvrtc_note(r.traces[0]);
    EXPECT_EQ(n.kernels, 12) << r.table();
    EXPECT_EQ(n.different, 12) << r.table();
    if (round == 0) {  // a fresh cache directory: everything compiled
      EXPECT_EQ(n.compiled, 12) << r.table();
      EXPECT_EQ(n.programs, 2) << r.table();
      EXPECT_EQ(n.threads, 2) << r.table();
    } else {
      EXPECT_EQ(n.reused, 12) << r.table();
      EXPECT_EQ(n.compiled, 0) << r.table();
    }
  }
}

TEST_F(JitCuda, ParallelCompileInAFreshProcess) {
  const std::string dir = temp_path("kiln-cuda-parallel-cache");
  std::filesystem::remove_all(dir);
  expect_child_passes("ParallelCompileOnTwoThreads", dir);
  std::filesystem::remove_all(dir);
}

TEST_F(JitCuda, CompileFailureFallsBackToEagerKernels) {
  const std::string dir = temp_path("kiln-cuda-fail-cache");
  std::filesystem::remove_all(dir);
  expect_child_passes("FallbackWhenCompilesFail", dir);
  std::filesystem::remove_all(dir);
}

TEST_F(JitCuda, DiskCacheUnderKilnCacheDir) {
  const std::string dir = temp_path("kiln-cuda-cache-test");
  std::filesystem::remove_all(dir);
  {
    SCOPED_TRACE("first process: compiles and stores");
    expect_child_passes("CompileAndReplay", dir);
  }
  const std::string cuda_dir = dir + "/cuda";
  ASSERT_TRUE(std::filesystem::is_directory(cuda_dir)) << cuda_dir;
  struct stat st;
  ASSERT_EQ(stat(cuda_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 022, 0u) << "the cache directory is writable by others";
  const auto stored = files_in(cuda_dir);
  ASSERT_GE(stored.size(), 1u);
  {
    SCOPED_TRACE("second process: the same kernels, nothing new stored");
    expect_child_passes("CompileAndReplay", dir);
    EXPECT_EQ(files_in(cuda_dir).size(), stored.size());
    for (const auto& [path, size] : stored) EXPECT_TRUE(std::filesystem::exists(path)) << path;
  }
  // Corrupt every cached file (flip a byte; truncate another): still right, no fallback.
  int files = 0;
  for (const auto& [path, size] : files_in(cuda_dir)) {
    std::string data = slurp(path);
    if (data.empty()) continue;
    if (files++ % 2 == 0) {
      data[data.size() / 2] ^= 0x5a;
    } else {
      data.resize(data.size() / 2);
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
  }
  {
    SCOPED_TRACE("third process: corrupt cache files");
    expect_child_passes("CompileAndReplay", dir);
  }
  std::filesystem::remove_all(dir);
}
