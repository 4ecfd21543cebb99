// Eager per-op overhead from C++: the host time of one tiny op (1-element float32
// tensors), i.e. everything kiln does around a kernel: dispatch, shape/dtype
// inference, output allocation, kernel selection and launch. Target (BENCHMARKS.md):
// 0.3 us or less per tiny CPU op from C++.
//
// The tracer is off for every row (plain eager dispatch) except the "_traced" ones,
// which run with it on, as users get by default: there the loop's ops become a hot
// trace that replays lazily, so the figure is the per-op cost of a lazy replay (the
// interpreting backend; results nobody reads may never be computed).
//
// CUDA rows (only where a GPU is present):
//   cuda_add_tiny       host time per launch, the stream drained once after the loop
//                       (the work queue can fill up, then this is bounded by the GPU)
//   cuda_add_tiny_sync  one op plus a stream synchronize per iteration (the latency)
#include <benchmark/benchmark.h>

#include <string>

#include "ops/api.h"
#include "runtime/cuda_context.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"
#include "tracer/api.h"

namespace {

using kiln::Tensor;

Tensor tiny(kiln::Device d = kiln::kCPU) { return kiln::rand({1}, kiln::TensorOptions(d)); }

// Per-op time when an iteration runs `ops` ops (shown by bench/bench_table.py).
void set_per_op(benchmark::State& state, int ops) {
  state.counters["per_op"] = benchmark::Counter(
      ops, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// Turns the tracer on for one benchmark, with no traces left from an earlier one.
struct TracerOn {
  TracerOn() {
    kiln::tracer::reset();
    kiln::tracer::set_enabled(true);
  }
  ~TracerOn() {
    kiln::tracer::flush();
    kiln::tracer::set_enabled(false);
    kiln::tracer::reset();
  }
};

void BM_add_tiny(benchmark::State& state) {
  Tensor a = tiny(), b = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b));
}
BENCHMARK(BM_add_tiny);

void BM_add_operator_tiny(benchmark::State& state) {  // a + b, the user's spelling
  Tensor a = tiny(), b = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_add_operator_tiny);

void BM_add_inplace_tiny(benchmark::State& state) {  // no output allocation
  Tensor a = tiny(), b = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(a.add_(b));
}
BENCHMARK(BM_add_inplace_tiny);

void BM_mul_scalar_tiny(benchmark::State& state) {
  Tensor a = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(a * 2.0);
}
BENCHMARK(BM_mul_scalar_tiny);

void BM_relu_tiny(benchmark::State& state) {
  Tensor a = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(a));
}
BENCHMARK(BM_relu_tiny);

void BM_view_tiny(benchmark::State& state) {  // a view op: metadata only, no kernel
  Tensor a = kiln::rand({2, 3});
  for (auto _ : state) benchmark::DoNotOptimize(a.transpose(0, 1));
}
BENCHMARK(BM_view_tiny);

void BM_reshape_tiny(benchmark::State& state) {
  Tensor a = kiln::rand({2, 3});
  for (auto _ : state) benchmark::DoNotOptimize(a.view({3, 2}));
}
BENCHMARK(BM_reshape_tiny);

void BM_sum_tiny(benchmark::State& state) {  // a reduction to a 0-dim tensor
  Tensor a = kiln::rand({4});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::sum(a));
}
BENCHMARK(BM_sum_tiny);

void BM_empty_tiny(benchmark::State& state) {  // factory: allocation + metadata only
  for (auto _ : state) benchmark::DoNotOptimize(kiln::empty({1}));
}
BENCHMARK(BM_empty_tiny);

// relu(x + b) * s on 1-element tensors: 3 ops per iteration, eager and traced.
void BM_add_relu_mul_tiny(benchmark::State& state) {
  Tensor x = tiny(), b = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(x + b) * 1.5);
  set_per_op(state, 3);
}
BENCHMARK(BM_add_relu_mul_tiny);

void BM_add_tiny_traced(benchmark::State& state) {
  TracerOn on;
  Tensor a = tiny(), b = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b));
}
BENCHMARK(BM_add_tiny_traced);

void BM_add_relu_mul_tiny_traced(benchmark::State& state) {
  TracerOn on;
  Tensor x = tiny(), b = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(x + b) * 1.5);
  set_per_op(state, 3);
}
BENCHMARK(BM_add_relu_mul_tiny_traced);

bool skip_without_gpu(benchmark::State& state) {
  if (kiln::cuda_context::is_available()) return false;
  state.SkipWithError("no CUDA device");
  for (auto _ : state) {
  }
  return true;
}

void BM_cuda_add_tiny(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor a = tiny(kiln::cuda_device(0)), b = tiny(kiln::cuda_device(0));
  kiln::cuda_context::synchronize(0);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b));
  kiln::cuda_context::synchronize(0);
}
BENCHMARK(BM_cuda_add_tiny);

void BM_cuda_relu_tiny(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor a = tiny(kiln::cuda_device(0));
  kiln::cuda_context::synchronize(0);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(a));
  kiln::cuda_context::synchronize(0);
}
BENCHMARK(BM_cuda_relu_tiny);

void BM_cuda_add_tiny_sync(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor a = tiny(kiln::cuda_device(0)), b = tiny(kiln::cuda_device(0));
  kiln::cuda_context::synchronize(0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kiln::add(a, b));
    kiln::cuda_context::synchronize(0);
  }
}
BENCHMARK(BM_cuda_add_tiny_sync);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kiln::tracer::set_enabled(false);  // plain eager unless a row turns it on
  benchmark::AddCustomContext("kiln_threads", std::to_string(kiln::num_threads()));
  benchmark::AddCustomContext("kiln_gpu", kiln::cuda_context::is_available()
                                              ? kiln::cuda_context::device_name(0)
                                              : std::string("none"));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
