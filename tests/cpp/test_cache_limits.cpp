// The LRU limits of the tracer's and the JIT's in-memory caches (issue 9): a program
// that keeps producing new shapes (new traces, new trie paths) or new kernels keeps at
// most KILN_MAX_TRACES compiled traces and KILN_TRACE_CACHE_OPS recorded ops per thread
// and KILN_KERNEL_CACHE_ENTRIES linked LLVM kernels (plus those compiled traces hold);
// what was evicted records, compiles and runs again with the right values, and a hot
// trace is never the one evicted.
#include <cmath>

#include "ops/api.h"
#include "tracer_util.h"
#ifdef KILN_WITH_LLVM
#include "jit/llvm/llvm_jit.h"
#endif

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

// One program per n: its first op (ones of n x 3) starts an anchor of its own, so every
// n is a new trace. Three runs: two warmups, then it compiles, then it replays.
double shaped_program(int64_t n) {
  Tensor a = kiln::ones({n, 3});
  Tensor y = kiln::exp(a * 0.25) * 2.0 + static_cast<double>(n);
  return kiln::sum(y).item<double>();
}
double shaped_expected(int64_t n) {
  return static_cast<double>(n * 3) * (std::exp(0.25) * 2.0 + static_cast<double>(n));
}

int64_t trace_replays(const tr::ExplainReport& r) {
  int64_t replays = 0;
  for (const auto& t : r.traces) replays += t.replays;
  return replays;
}

class CacheLimits : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    tr::config().jit = true;
  }
};

TEST_F(CacheLimits, CompiledTracesStayAtTheLimitAndEvictedOnesCompileAgain) {
  tr::config().max_traces = 8;
  size_t most = 0;
  for (int64_t n = 1; n <= 40; ++n) {
    for (int rep = 0; rep < 4; ++rep) {
      const double got = shaped_program(n);
      ASSERT_NEAR(got, shaped_expected(n), 1e-4 * shaped_expected(n)) << "n " << n;
    }
    most = std::max(most, tr::explain().traces.size());
  }
  tr::ExplainReport r = tr::explain();
  EXPECT_LE(most, 8u) << r.table();
  EXPECT_GE(r.traces.size(), 2u) << r.table();
  EXPECT_GE(r.evicted_traces, 30) << r.table();
  EXPECT_NE(r.table().find("Evicted"), std::string::npos) << r.table();
  // n = 1 was evicted long ago: it records, compiles and replays again, right.
  const int64_t recorded = r.ops_recorded;
  for (int rep = 0; rep < 4; ++rep) EXPECT_NEAR(shaped_program(1), shaped_expected(1), 1e-4);
  r = tr::explain();
  EXPECT_GT(r.ops_recorded, recorded) << "an evicted trace must record again";
  EXPECT_GT(trace_replays(r), 0) << r.table();
  bool found = false;
  for (const auto& t : r.traces) found = found || (t.replays >= 1 && t.ops.size() >= 4);
  EXPECT_TRUE(found) << r.table();
  EXPECT_LE(r.traces.size(), 8u);
}

TEST_F(CacheLimits, RecordedOpsStayAtTheLimitWhenEveryShapeIsNew) {
  // The same anchor (exp of an input) with a new shape each time, each seen once: without
  // a limit the trie keeps one path per shape forever. Such an anchor's recording is
  // suspended with backoff (FreshPathPenalty): 8 walks recorded, 16 eager, 8 recorded, 32
  // eager, ... so 600 walks record about 48 paths of 4 ops, over the limit of 64 ops.
  tr::config().trace_cache_ops = 64;
  tr::config().symbolic_shapes = false;  // each size a path (symbolic_shapes.h)
  int64_t most = 0;
  for (int64_t n = 1; n <= 600; ++n) {
    const Tensor x = eager([&] { return kiln::full({n}, 0.5); });  // an input, not an op
    Tensor y = kiln::exp(x) * 3.0 - 1.0;
    const double got = kiln::sum(y).item<double>();
    ASSERT_NEAR(got, static_cast<double>(n) * (std::exp(0.5) * 3.0 - 1.0), 1e-3) << n;
    most = std::max(most, tr::Tracer::current().cached_ops());
  }
  const auto r = tr::explain();
  EXPECT_LE(most, 64) << r.table();
  EXPECT_GT(r.evicted_ops, 100) << r.table();
  EXPECT_GE(r.fresh_path_suspensions, 5) << r.table();
  EXPECT_LT(r.ops_recorded, 600 * 4 / 4) << "recording was not suspended: " << r.table();
}

TEST_F(CacheLimits, AHotTraceIsNeverTheOneEvicted) {
  tr::config().max_traces = 4;
  tr::config().trace_cache_ops = 512;
  Tensor x = random_tensor({64});
  Tensor acc = kiln::zeros({64});
  const Host xh = read(x);
  int64_t hot_compiles = 0;
  for (int64_t n = 1; n <= 120; ++n) {
    // The hot loop: the same trace every time.
    Tensor y = kiln::tanh(x) * 0.5 + kiln::sigmoid(x);
    acc.add_(y);
    (void)kiln::sum(acc).item<double>();
    // And a stream of one-off traces with new shapes around it.
    for (int rep = 0; rep < 3; ++rep)
      ASSERT_NEAR(shaped_program(n), shaped_expected(n), 1e-4 * shaped_expected(n));
    if (n == 5) {
      for (const auto& t : tr::explain().traces)
        if (std::find(t.ops.begin(), t.ops.end(), "sigmoid") != t.ops.end()) ++hot_compiles;
    }
  }
  const tr::ExplainReport r = tr::explain();
  int hot = 0;
  int64_t hot_replays = 0;
  for (const auto& t : r.traces) {
    if (std::find(t.ops.begin(), t.ops.end(), "sigmoid") != t.ops.end()) {
      ++hot;
      hot_replays = t.replays;
      EXPECT_EQ(t.generation, 0) << "the hot trace was compiled again\n" << r.table();
    }
  }
  EXPECT_EQ(hot_compiles, 1) << r.table();
  EXPECT_EQ(hot, 1) << r.table();
  EXPECT_GE(hot_replays, 110) << r.table();
  EXPECT_GT(r.evicted_traces, 50) << r.table();
  Host want(xh.sizes);
  for (size_t i = 0; i < want.v.size(); ++i)
    want.v[i] = 120 * (std::tanh(xh.v[i]) * 0.5 + 1 / (1 + std::exp(-xh.v[i])));
  EXPECT_TRUE(all_close(acc, want, Tol{1e-5, 1e-5}));
}

#ifdef KILN_WITH_LLVM
// Restores the kernel table's limit.
struct KernelLimitScope {
  size_t saved = kiln::jit::llvm_backend::LlvmJit::instance().max_entries();
  explicit KernelLimitScope(size_t n) {
    kiln::jit::llvm_backend::LlvmJit::instance().set_max_entries(n);
  }
  ~KernelLimitScope() { kiln::jit::llvm_backend::LlvmJit::instance().set_max_entries(saved); }
};

// A chain of unary ops picked by the bits of `code`: a distinct fused kernel per code.
Tensor chain(const Tensor& x, int code) {
  Tensor y = x * 0.75;
  for (int b = 0; b < 6; ++b) y = (code >> b) & 1 ? kiln::sin(y) + 0.125 : kiln::cos(y) * 0.5;
  return y;
}
double chain_ref(double x, int code) {
  double y = x * 0.75;
  for (int b = 0; b < 6; ++b) y = (code >> b) & 1 ? std::sin(y) + 0.125 : std::cos(y) * 0.5;
  return y;
}
#endif

TEST_F(CacheLimits, LlvmKernelTableStaysAtTheLimitAndEvictedKernelsComeBack) {
#ifndef KILN_WITH_LLVM
  GTEST_SKIP() << "built without LLVM";
#else
  auto& jit = kiln::jit::llvm_backend::LlvmJit::instance();
  KernelLimitScope limit(4);
  tr::config().max_traces = 2;  // traces pin their kernels: keep few of them
  // Every code is a variant of one trace (same first op): no recompile limit here.
  tr::config().recompile_limit = 1000;
  const Tensor x = random_tensor({97});
  const Host xh = read(x);
  const auto before = jit.stats();
  auto run = [&](int code) {
    Tensor y;
    for (int rep = 0; rep < 4; ++rep) {
      tr::Region region;
      y = chain(x, code);
    }
    const Host got = read(y);
    for (size_t i = 0; i < got.v.size(); ++i)
      EXPECT_NEAR(got.v[i], chain_ref(xh.v[i], code), 1e-5) << "code " << code << " at " << i;
  };
  int64_t most = 0;
  for (int code = 0; code < 24; ++code) {
    run(code);
    const tr::ExplainReport r = tr::explain();
    int64_t held = 0;
    for (const auto& t : r.traces) held += t.kernels;
    const auto s = jit.stats();
    EXPECT_LE(s.resident, 4 + held) << "code " << code;
    most = std::max(most, s.resident);
  }
  const auto mid = jit.stats();
  EXPECT_LE(most, 4 + 2);
  EXPECT_GE(mid.evicted - before.evicted, 16);
  // An evicted kernel (code 0) comes back from the disk cache or a compile, not memory.
  tr::reset();
  run(0);
  const auto after = jit.stats();
  EXPECT_EQ(after.compiled + after.disk_hits, mid.compiled + mid.disk_hits + 1);
#endif
}

}  // namespace
