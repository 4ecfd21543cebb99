// Memory stability of a traced training loop (issue 9): a small MLP trained with Adam,
// forward + cross_entropy + backward + step + loss.item() per iteration, for many
// iterations, sampling the process's resident memory (VmRSS), glibc's heap in use and,
// on a GPU, kiln's device allocator (bytes in use + cached) every N iterations after a
// warmup. Fails (exit 1) when any of them grows after the warmup by more than the bound
// (default: 8 MiB or 2% of the first sample, whichever is larger), or when the tracer's
// or the JIT's caches grow beyond their limits.
//
// Variants: fixed (one batch size), alternate (two batch sizes, every other step), break
// (a host read in the middle of the step: two traces per step). A last check, new_shapes,
// keeps producing new shapes (and new traces) and samples the tracer's and the JIT's
// caches: they must stay within KILN_MAX_TRACES / KILN_TRACE_CACHE_OPS /
// KILN_KERNEL_CACHE_ENTRIES (scripts/memory_stability.sh runs the long budgets; ctest a
// quick one).
//
//   kiln_memory_stability [--iterations N] [--cuda-iterations N] [--samples K]
//                         [--warmup-fraction F] [--variants fixed,alternate,break]
//                         [--shapes N] [--bound-mib M] [--bound-percent P] [--device cpu|cuda|all]
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ops/api.h"
#include "ops/losses.h"
#include "ops/optim/optimizer.h"
#include "runtime/cuda_context.h"
#include "tracer/api.h"
#include "tracer/config.h"
#ifdef KILN_WITH_LLVM
#include "jit/llvm/llvm_jit.h"
#endif

namespace {

using kiln::Device;
using kiln::DeviceType;
using kiln::Dims;
using kiln::Tensor;

struct Options {
  int64_t iterations = 100000;
  int64_t cuda_iterations = 10000;
  int samples = 20;
  double warmup_fraction = 0.1;
  std::vector<std::string> variants = {"fixed", "alternate", "break"};
  int64_t shapes = 5000;
  double bound_mib = 8.0;
  double bound_percent = 2.0;
  std::string device = "all";
};

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// VmRSS of this process, in bytes.
double rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024.0;
  }
  return -1;
}

// Bytes glibc's malloc has handed out and not had back (arenas + mmapped blocks): the
// heap in use, including the blocks kiln's CPU allocator keeps for reuse.
double heap_bytes() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd);
}

struct Sample {
  int64_t iteration = 0;
  double rss = 0, heap = 0, device = 0;
  size_t traces = 0;
  int64_t cached_ops = 0;
  int64_t kernels = -1;  // LLVM kernels linked (-1: no LLVM)
  double loss = 0;
  double ms_per_iter = 0;
};

int64_t llvm_resident() {
#ifdef KILN_WITH_LLVM
  return kiln::jit::llvm_backend::LlvmJit::instance().stats().resident;
#else
  return -1;
#endif
}

// A deterministic "random" tensor (no global generator: reproducible in any order).
Tensor pattern(const Dims& sizes, uint64_t seed, double scale, Device device) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>((static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5) * 2 * scale);
  }
  return kiln::from_vector(v, sizes).to(device);
}

Tensor labels(int64_t batch, int64_t classes, uint64_t seed, Device device) {
  std::vector<int64_t> v(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i)
    v[static_cast<size_t>(i)] = static_cast<int64_t>((seed * 31 + static_cast<uint64_t>(i) * 7) %
                                                     static_cast<uint64_t>(classes));
  return kiln::from_vector(v, {batch}).to(device);
}

struct Result {
  std::string name;
  std::vector<Sample> samples;
  bool ok = true;
  std::string why;
};

double device_bytes(Device device) {
  if (!device.is_cuda()) return 0;
  return static_cast<double>(kiln::cuda_context::allocated_bytes(device.index) +
                             kiln::cuda_context::cached_bytes(device.index));
}

// The training loop of one variant; samples after the warmup.
Result run_training(const std::string& variant, Device device, int64_t iterations,
                    const Options& o) {
  kiln::tracer::reset();
  const int64_t in = 64, hidden = 128, classes = 10;
  std::vector<Tensor> params = {
      pattern({hidden, in}, 1, 0.15, device), pattern({hidden}, 2, 0.05, device),
      pattern({classes, hidden}, 3, 0.1, device), pattern({classes}, 4, 0.05, device)};
  for (Tensor& p : params) p.set_requires_grad(true);
  kiln::optim::AdamOptions ao;
  ao.lr = 1e-3;
  kiln::optim::Adam opt(params, ao);
  const int64_t batches[2] = {32, 48};
  Tensor xs[2], ys[2];
  for (int b = 0; b < 2; ++b) {
    xs[b] = pattern({batches[b], in}, 10 + static_cast<uint64_t>(b), 1.0, device);
    ys[b] = labels(batches[b], classes, 20 + static_cast<uint64_t>(b), device);
  }

  Result r;
  r.name = variant + (device.is_cuda() ? " (cuda)" : " (cpu)");
  const int64_t warmup = std::max<int64_t>(1, static_cast<int64_t>(iterations * o.warmup_fraction));
  const int64_t every = std::max<int64_t>(1, (iterations - warmup) / std::max(1, o.samples));
  auto last = std::chrono::steady_clock::now();
  int64_t last_iter = 0;
  double loss_value = 0;
  for (int64_t it = 1; it <= iterations; ++it) {
    // Halfway through the warmup the background compiles are waited for, so that the
    // plans have swapped in (their arenas allocated) well before the first sample, however
    // slow the compiles are on a loaded machine.
    if (it == warmup / 2) kiln::tracer::wait_for_compiles();
    const int b = variant == "alternate" ? static_cast<int>(it % 2) : 0;
    Tensor h = kiln::relu(kiln::linear(xs[b], params[0], params[1]));
    if (variant == "break") {
      // A host read in the middle of the step: the step is two traces.
      if (kiln::sum(h).item<double>() < 0) r.why = "a sum of relu outputs below zero";
    }
    Tensor loss = kiln::cross_entropy(kiln::linear(h, params[2], params[3]), ys[b]);
    opt.zero_grad();
    loss.backward();
    opt.step();
    loss_value = loss.item<double>();
    if (it >= warmup && ((it - warmup) % every == 0 || it == iterations)) {
      const auto now = std::chrono::steady_clock::now();
      Sample s;
      s.iteration = it;
      s.rss = rss_bytes();
      s.heap = heap_bytes();
      s.device = device_bytes(device);
      s.traces = kiln::tracer::explain().traces.size();
      s.cached_ops = kiln::tracer::Tracer::current().cached_ops();
      s.kernels = llvm_resident();
      s.loss = loss_value;
      s.ms_per_iter = it > last_iter && !r.samples.empty()
                          ? std::chrono::duration<double, std::milli>(now - last).count() /
                                static_cast<double>(it - last_iter)
                          : 0;
      last = now;
      last_iter = it;
      r.samples.push_back(s);
    }
  }
  if (!r.why.empty()) r.ok = false;
  const kiln::tracer::ExplainReport report = kiln::tracer::explain();
  int64_t replays = 0;
  for (const auto& t : report.traces) replays += t.replays;
  if (replays < iterations / 2) {
    r.ok = false;
    r.why += "the loop did not replay compiled traces (" + std::to_string(replays) +
             " replays in " + std::to_string(iterations) + " iterations)\n" + report.table();
  }
  if (!(loss_value < 2.302585 && loss_value >= 0)) {  // below log(10): it learned something
    r.ok = false;
    r.why += "final loss " + std::to_string(loss_value) + " (no learning)";
  }
  return r;
}

// Growth from the first sample to the last, against the bound.
// caches: also require the tracer's and the JIT's cache counts not to grow.
bool check_growth(Result& r, const Options& o, bool device, bool caches = true) {
  if (r.samples.size() < 2) return true;
  const Sample& a = r.samples.front();
  const Sample& b = r.samples.back();
  auto over = [&](const char* what, double first, double lastv) {
    const double bound = std::max(o.bound_mib * 1024 * 1024, first * o.bound_percent / 100.0);
    if (lastv - first > bound) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s grew %.2f MiB after the warmup (bound %.2f MiB)\n", what,
                    mib(lastv - first), mib(bound));
      r.why += buf;
      r.ok = false;
    }
  };
  over("resident memory", a.rss, b.rss);
  over("heap in use", a.heap, b.heap);
  if (device) over("device memory", a.device, b.device);
  if (caches && (b.traces > a.traces || b.cached_ops > a.cached_ops ||
                 (a.kernels >= 0 && b.kernels > a.kernels))) {
    r.ok = false;
    r.why += "the tracer's or the JIT's caches grew after the warmup\n";
  }
  return r.ok;
}

void print(const Result& r, bool device) {
  std::printf("\n== %s\n", r.name.c_str());
  std::printf("  %10s  %9s  %9s  %9s  %9s%s  %6s  %7s  %7s  %9s  %9s\n", "iteration", "rss_MiB",
              "d_rss", "heap_MiB", "d_heap", device ? "  dev_MiB  d_dev" : "", "traces", "tr_ops",
              "kernels", "loss", "ms/iter");
  const Sample& a = r.samples.front();
  for (const Sample& s : r.samples) {
    char dev[64] = "";
    if (device)
      std::snprintf(dev, sizeof dev, "  %7.2f  %5.2f", mib(s.device), mib(s.device - a.device));
    std::printf("  %10lld  %9.2f  %+9.2f  %9.2f  %+9.2f%s  %6zu  %7lld  %7lld  %9.3g  %9.4f\n",
                static_cast<long long>(s.iteration), mib(s.rss), mib(s.rss - a.rss), mib(s.heap),
                mib(s.heap - a.heap), dev, s.traces, static_cast<long long>(s.cached_ops),
                static_cast<long long>(s.kernels), s.loss, s.ms_per_iter);
  }
  std::printf("  %s\n", r.ok ? "flat: PASS" : ("FAIL: " + r.why).c_str());
  std::fflush(stdout);
}

// A program that keeps making new shapes, and with them new traces: n = 1, 2, ... rows,
// each shape run three times (two warmups, then a compile and a replay); every shape's
// first op (ones of that shape) starts a new anchor, and every 7th shape a differently
// built op chain makes new kernels. The caches must stay at their limits, and the
// results right.
Result run_new_shapes(int64_t shapes, const Options& o) {
  kiln::tracer::reset();
  Result r;
  r.name = "new_shapes (cpu): " + std::to_string(shapes) + " distinct shapes";
  const auto& c = kiln::tracer::config();
  const int64_t every = std::max<int64_t>(1, shapes / std::max(1, o.samples));
  int64_t max_ops = 0;
  size_t max_traces = 0;
  for (int64_t n = 1; n <= shapes; ++n) {
    const int64_t rows = 1 + (n % 997), cols = 1 + n / 997;
    for (int rep = 0; rep < 3; ++rep) {
      // The compile of the second run's trace (in the background by default) lands
      // before the third, which replays it: the cache fills as it would over more runs.
      if (rep == 2) kiln::tracer::wait_for_compiles();
      Tensor a = kiln::ones({rows, cols});
      Tensor y = kiln::exp(a * 0.5) + 1.0;
      const int64_t variant = n % 7;
      for (int64_t k = 0; k < variant; ++k) y = k % 2 ? kiln::tanh(y) * 2.0 : kiln::sqrt(y) + 0.25;
      double want = std::exp(0.5) + 1.0;
      for (int64_t k = 0; k < variant; ++k)
        want = k % 2 ? std::tanh(want) * 2.0 : std::sqrt(want) + 0.25;
      const double got = kiln::sum(y).item<double>() / static_cast<double>(rows * cols);
      if (std::abs(got - want) > 1e-5 * std::max(1.0, std::abs(want))) {
        r.ok = false;
        r.why = "wrong result for shape " + std::to_string(rows) + "x" + std::to_string(cols) +
                ": " + std::to_string(got) + " instead of " + std::to_string(want);
        return r;
      }
    }
    const size_t traces = kiln::tracer::explain().traces.size();
    const int64_t ops = kiln::tracer::Tracer::current().cached_ops();
    max_traces = std::max(max_traces, traces);
    max_ops = std::max(max_ops, ops);
    if (n % every == 0 || n == shapes) {
      Sample s;
      s.iteration = n;
      s.rss = rss_bytes();
      s.heap = heap_bytes();
      s.traces = traces;
      s.cached_ops = ops;
      s.kernels = llvm_resident();
      r.samples.push_back(s);
    }
  }
  // Once the caches are full (the second half of the run), memory stays flat too.
  if (r.samples.size() >= 4) {
    Result tail;
    tail.samples.assign(r.samples.begin() + static_cast<std::ptrdiff_t>(r.samples.size() / 2),
                        r.samples.end());
    check_growth(tail, o, false, false);
    if (!tail.ok) {
      r.ok = false;
      r.why += "in the second half, with the caches full: " + tail.why;
    }
  }
  const kiln::tracer::ExplainReport report = kiln::tracer::explain();
  if (max_traces > static_cast<size_t>(c.max_traces) || max_ops > c.trace_cache_ops) {
    r.ok = false;
    r.why += "the tracer kept " + std::to_string(max_traces) + " compiled traces / " +
             std::to_string(max_ops) + " ops (limits " + std::to_string(c.max_traces) + " / " +
             std::to_string(c.trace_cache_ops) + ")\n";
  }
  if (shapes > c.max_traces && report.evicted_traces == 0) {
    r.ok = false;
    r.why += "more shapes than KILN_MAX_TRACES but nothing was evicted\n";
  }
#ifdef KILN_WITH_LLVM
  const auto& jit = kiln::jit::llvm_backend::LlvmJit::instance();
  // Kernels in the table: at most the limit plus those the kept traces hold.
  int64_t held = 0;
  for (const auto& t : report.traces) held += t.kernels;
  if (jit.stats().resident > static_cast<int64_t>(jit.max_entries()) + held) {
    r.ok = false;
    r.why += "the LLVM kernel table holds " + std::to_string(jit.stats().resident) +
             " kernels (limit " + std::to_string(jit.max_entries()) + " + " + std::to_string(held) +
             " held by traces)\n";
  }
#endif
  return r;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--iterations") {
      o.iterations = std::stoll(next());
    } else if (a == "--cuda-iterations") {
      o.cuda_iterations = std::stoll(next());
    } else if (a == "--samples") {
      o.samples = std::stoi(next());
    } else if (a == "--warmup-fraction") {
      o.warmup_fraction = std::stod(next());
    } else if (a == "--variants") {
      o.variants = split(next());
    } else if (a == "--shapes") {
      o.shapes = std::stoll(next());
    } else if (a == "--bound-mib") {
      o.bound_mib = std::stod(next());
    } else if (a == "--bound-percent") {
      o.bound_percent = std::stod(next());
    } else if (a == "--device") {
      o.device = next();
    } else {
      std::fprintf(stderr,
                   "usage: %s [--iterations N] [--cuda-iterations N] [--samples K] "
                   "[--warmup-fraction F] [--variants fixed,alternate,break] [--shapes N] "
                   "[--bound-mib M] [--bound-percent P] [--device cpu|cuda|all]\n",
                   argv[0]);
      return 2;
    }
  }
  const auto& c = kiln::tracer::config();
  std::printf(
      "kiln memory stability: %lld CPU iterations, %lld CUDA iterations, %d samples "
      "after %.0f%% warmup; bound max(%.1f MiB, %.1f%%); KILN_MAX_TRACES=%d "
      "KILN_TRACE_CACHE_OPS=%lld",
      static_cast<long long>(o.iterations), static_cast<long long>(o.cuda_iterations), o.samples,
      o.warmup_fraction * 100, o.bound_mib, o.bound_percent, c.max_traces,
      static_cast<long long>(c.trace_cache_ops));
#ifdef KILN_WITH_LLVM
  std::printf(" KILN_KERNEL_CACHE_ENTRIES=%zu",
              kiln::jit::llvm_backend::LlvmJit::instance().max_entries());
#endif
  std::printf("\n");
  bool ok = true;
  std::vector<std::string> summary;
  auto record = [&](const Result& r, bool device) {
    print(r, device);
    ok = ok && r.ok;
    if (!r.samples.empty()) {
      char line[256];
      std::snprintf(line, sizeof line, "%-28s rss %8.2f -> %8.2f MiB (%+.2f)  heap %+.2f MiB  %s",
                    r.name.c_str(), mib(r.samples.front().rss), mib(r.samples.back().rss),
                    mib(r.samples.back().rss - r.samples.front().rss),
                    mib(r.samples.back().heap - r.samples.front().heap), r.ok ? "PASS" : "FAIL");
      summary.push_back(line);
    } else {
      summary.push_back(r.name + " " + (r.ok ? "PASS" : "FAIL: " + r.why));
    }
  };
  if (o.device == "cpu" || o.device == "all") {
    for (const std::string& v : o.variants) {
      Result r = run_training(v, kiln::kCPU, o.iterations, o);
      check_growth(r, o, false);
      record(r, false);
    }
    if (o.shapes > 0) {
      Result r = run_new_shapes(o.shapes, o);
      record(r, false);
    }
  }
  if (o.device == "cuda" || o.device == "all") {
    if (!kiln::cuda_context::is_available()) {
      std::printf("\ncuda: skipped (%s)\n",
                  kiln::cuda_context::built_with_cuda() ? "no CUDA device" : "built without CUDA");
    } else {
      for (const std::string& v : o.variants) {
        Result r = run_training(v, Device{DeviceType::CUDA, 0}, o.cuda_iterations, o);
        check_growth(r, o, true);
        record(r, true);
      }
    }
  }
  std::printf("\nsummary\n");
  for (const std::string& s : summary) std::printf("  %s\n", s.c_str());
  std::printf("%s\n", ok ? "memory stability: PASS" : "memory stability: FAIL");
  return ok ? 0 : 1;
}
