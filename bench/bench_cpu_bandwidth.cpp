// CPU pointwise bandwidth: kiln's eager kernels over 2^24 float32 (64 MiB per tensor)
// against the copy floor (std::memcpy of the same bytes, on one thread and split over
// kiln's threads) and plain C++ loops. GB/s counts bytes read plus bytes written
// (an add reads 2 and writes 1 tensor: 3 x 64 MiB per call). The argument in a
// benchmark's name is log2 of the element count: a few rows also run at 2^27 (512 MiB
// per tensor), which no last-level cache holds (the 2-core build machine reports a
// 480 MiB L3, so its 2^24 rows measure cache, not DRAM, bandwidth).
//
// The tracer is off (plain eager kernels, every result computed). Times are wall-clock
// (UseRealTime) since kiln splits large ops over its threads.
// The "_out" rows allocate their output every call, as eager code does; kiln's CPU
// allocator should make that cost about the same as the in-place rows.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ops/api.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"
#include "tracer/api.h"

namespace {

using kiln::Tensor;

int64_t elements(const benchmark::State& state) { return int64_t{1} << state.range(0); }

void set_bandwidth(benchmark::State& state, int tensors_moved) {
  double bytes = static_cast<double>(elements(state)) * sizeof(float);  // one tensor
  state.counters["GB/s"] = benchmark::Counter(tensors_moved * bytes * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// 64-byte aligned host buffer, touched once so page faults stay out of the timings.
struct Buffer {
  std::unique_ptr<float[], void (*)(void*)> p{nullptr, std::free};
  Buffer(int64_t n, float fill) {
    p.reset(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
    for (int64_t i = 0; i < n; ++i) p[i] = fill + static_cast<float>(i % 1000) * 1e-3f;
  }
  float* get() const { return p.get(); }
};

// ---- the floor: copies and plain loops
void BM_memcpy_1thread(benchmark::State& state) {
  const int64_t n = elements(state);
  Buffer src(n, 1.f), dst(n, 0.f);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 2);
}
BENCHMARK(BM_memcpy_1thread)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_memcpy_threads(benchmark::State& state) {  // split over kiln's thread pool
  const int64_t n = elements(state);
  Buffer src(n, 1.f), dst(n, 0.f);
  for (auto _ : state) {
    kiln::parallel_for(0, n, 1 << 18, [&](int64_t b, int64_t e) {
      std::memcpy(dst.get() + b, src.get() + b, (e - b) * sizeof(float));
    });
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 2);
}
BENCHMARK(BM_memcpy_threads)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_loop_add_1thread(benchmark::State& state) {  // out[i] = a[i] + b[i]
  const int64_t n = elements(state);
  Buffer a(n, 1.f), b(n, 2.f), out(n, 0.f);
  float* __restrict o = out.get();
  const float* __restrict x = a.get();
  const float* __restrict y = b.get();
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 3);
}
BENCHMARK(BM_loop_add_1thread)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_loop_add_threads(benchmark::State& state) {
  const int64_t n = elements(state);
  Buffer a(n, 1.f), b(n, 2.f), out(n, 0.f);
  for (auto _ : state) {
    kiln::parallel_for(0, n, 1 << 18, [&](int64_t lo, int64_t hi) {
      float* __restrict o = out.get();
      const float* __restrict x = a.get();
      const float* __restrict y = b.get();
      for (int64_t i = lo; i < hi; ++i) o[i] = x[i] + y[i];
    });
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 3);
}
BENCHMARK(BM_loop_add_threads)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_loop_exp_1thread(benchmark::State& state) {  // scalar libm exp (what -O2 gives)
  const int64_t n = elements(state);
  Buffer a(n, 0.5f), out(n, 0.f);
  float* __restrict o = out.get();
  const float* __restrict x = a.get();
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) o[i] = std::exp(x[i]);
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, 2);
}
BENCHMARK(BM_loop_exp_1thread)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- kiln eager
Tensor input(const benchmark::State& state, double lo) {
  return kiln::rand({elements(state)}) + lo;
}

void BM_kiln_add_out(benchmark::State& state) {
  Tensor a = input(state, 0.0), b = input(state, 1.0);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b));
  set_bandwidth(state, 3);
}
BENCHMARK(BM_kiln_add_out)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_kiln_add_inplace(benchmark::State& state) {
  Tensor a = input(state, 0.0), b = input(state, 1.0);
  for (auto _ : state) benchmark::DoNotOptimize(a.add_(b));
  set_bandwidth(state, 3);
}
BENCHMARK(BM_kiln_add_inplace)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_kiln_relu_out(benchmark::State& state) {
  Tensor a = input(state, -0.5);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(a));
  set_bandwidth(state, 2);
}
BENCHMARK(BM_kiln_relu_out)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_kiln_mul_scalar_out(benchmark::State& state) {
  Tensor a = input(state, 0.0);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::mul(a, 1.5));
  set_bandwidth(state, 2);
}
BENCHMARK(BM_kiln_mul_scalar_out)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_kiln_exp_out(benchmark::State& state) {
  Tensor a = input(state, -0.5);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::exp(a));
  set_bandwidth(state, 2);
}
BENCHMARK(BM_kiln_exp_out)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_kiln_clone(benchmark::State& state) {  // kiln's own copy
  Tensor a = input(state, 0.0);
  for (auto _ : state) benchmark::DoNotOptimize(a.clone());
  set_bandwidth(state, 2);
}
BENCHMARK(BM_kiln_clone)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

// relu(x + b) * s as three eager ops (BENCHMARKS.md's add_relu_mul; the JIT fuses it
// later). 3 + 2 + 2 tensors move.
void BM_kiln_add_relu_mul_eager(benchmark::State& state) {
  Tensor x = input(state, -0.5), b = input(state, 0.0);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(x + b) * 1.5);
  set_bandwidth(state, 7);
}
BENCHMARK(BM_kiln_add_relu_mul_eager)->Arg(24)->UseRealTime()->Unit(benchmark::kMillisecond);

// The 2^27 rows last, so that their 512 MiB buffers (and what kiln's allocator caches
// of them) do not disturb the 2^24 rows.
BENCHMARK(BM_memcpy_1thread)->Arg(27)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_memcpy_threads)->Arg(27)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_loop_add_threads)->Arg(27)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_add_out)->Arg(27)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_add_inplace)->Arg(27)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_relu_out)->Arg(27)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kiln::tracer::set_enabled(false);  // eager kernels: every result is computed
  benchmark::AddCustomContext("kiln_threads", std::to_string(kiln::num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
