// kiln's C++ demo (run by scripts/demo.sh after the Python one, examples/demo.py).
//
// 1. Warmup: the seed MLP and a transformer block (attention + layer_norm + MLP) as plain
//    eager code in a loop, with a loss printed every few iterations (item(): a graph
//    break). kiln's tracer compiles the repeating op stream; the demo prints the
//    per-iteration time before and after warmup, the speedup and tracer::explain().
// 2. Eager ops: a 3-layer MLP forward pass, a softmax and a few reductions on the CPU,
//    then the same on the GPU when there is one, with a CPU-vs-GPU agreement check.
// Only the public API is used: ops/api.h, runtime/tensor.h, runtime/cuda_context.h,
// tracer/api.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "ops/api.h"
#include "runtime/cuda_context.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tracer/api.h"
#include "tracer/tracer.h"

namespace {

using kiln::Device;
using kiln::Tensor;

struct Mlp {
  Tensor w1, b1, w2, b2, w3, b3;

  Mlp to(Device d) const { return {w1.to(d), b1.to(d), w2.to(d), b2.to(d), w3.to(d), b3.to(d)}; }

  Tensor forward(const Tensor& x) const {
    Tensor h = kiln::relu(kiln::linear(x, w1, b1));
    h = kiln::relu(kiln::linear(h, w2, b2));
    return kiln::linear(h, w3, b3);
  }
};

// Weights scaled like PyTorch's default init so activations stay O(1).
Mlp make_mlp(int64_t in, int64_t hidden, int64_t out) {
  auto layer = [](int64_t fan_in, int64_t fan_out, Tensor* w, Tensor* b) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    *w = (kiln::rand({fan_out, fan_in}) * 2.0 - 1.0) * bound;
    *b = (kiln::rand({fan_out}) * 2.0 - 1.0) * bound;
  };
  Mlp m;
  layer(in, hidden, &m.w1, &m.b1);
  layer(hidden, hidden, &m.w2, &m.b2);
  layer(hidden, out, &m.w3, &m.b3);
  return m;
}

// What one run of the workload produces (kept for the CPU-vs-GPU comparison).
struct Results {
  Tensor logits, probs, row_sums, argmax, mean_logit;
};

Results run_workload(const Mlp& m, const Tensor& x) {
  Results r;
  r.logits = m.forward(x);
  r.probs = kiln::softmax(r.logits, -1);
  r.row_sums = kiln::sum(r.probs, {-1});
  r.argmax = kiln::argmax(r.probs, int64_t{-1});
  r.mean_logit = kiln::mean(r.logits);
  return r;
}

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// ---- 1. warmup: eager model code, faster once the tracer has compiled it

struct Linear {
  Tensor w, b;
  Linear(int64_t in, int64_t out, Device d) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    w = ((kiln::rand({out, in}) * 2.0 - 1.0) * bound).to(d);
    b = ((kiln::rand({out}) * 2.0 - 1.0) * bound).to(d);
  }
  Tensor operator()(const Tensor& x) const { return kiln::linear(x, w, b); }
};

// A pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).
struct Block {
  int64_t dim, heads;
  Linear qkv, proj, fc1, fc2;
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;
  Block(int64_t c, int64_t h, Device d)
      : dim(c),
        heads(h),
        qkv(c, 3 * c, d),
        proj(c, c, d),
        fc1(c, 4 * c, d),
        fc2(4 * c, c, d),
        ln1_w(kiln::ones({c}).to(d)),
        ln1_b(kiln::zeros({c}).to(d)),
        ln2_w(kiln::ones({c}).to(d)),
        ln2_b(kiln::zeros({c}).to(d)) {}

  Tensor attention(const Tensor& x) const {
    int64_t B = x.size(0), T = x.size(1), hd = dim / heads;
    std::vector<Tensor> qkv_ = kiln::split(qkv(x), dim, 2);
    auto heads_of = [&](const Tensor& t) { return t.view({B, T, heads, hd}).transpose(1, 2); };
    Tensor q = heads_of(qkv_[0]), k = heads_of(qkv_[1]), v = heads_of(qkv_[2]);
    Tensor att = kiln::softmax(kiln::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(hd)), -1);
    return proj(kiln::matmul(att, v).transpose(1, 2).contiguous().view({B, T, dim}));
  }
  Tensor operator()(Tensor x) const {
    x = x + attention(kiln::layer_norm(x, {dim}, ln1_w, ln1_b));
    return x + fc2(kiln::gelu(fc1(kiln::layer_norm(x, {dim}, ln2_w, ln2_b)), true));
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void warmup_demo(Device dev, int iterations, int every) {
  kiln::manual_seed(0);
  Linear fc1(256, 512, dev), fc2(512, 512, dev), fc3(512, 10, dev);
  Block block(128, 4, dev);
  Tensor x = kiln::randn({64, 256}).to(dev), target = kiln::randn({64, 10}).to(dev);
  Tensor tokens = kiln::randn({4, 64, 128}).to(dev);
  double last_loss = 0;
  // The loop body, as a user writes it; returns the iteration's time in microseconds.
  auto iteration = [&](int i) {
    double t0 = now_us();
    Tensor logits = fc3(kiln::relu(fc2(kiln::relu(fc1(x)))));
    Tensor d = logits - target;
    Tensor loss = kiln::mean(d * d);
    if ((i + 1) % every == 0) last_loss = loss.item<double>();  // the graph break
    Tensor h = block(tokens);
    Tensor total = loss + kiln::mean(h * h);
    if (dev.is_cuda()) kiln::cuda_context::synchronize(dev.index);
    return now_us() - t0;
  };
  std::printf(
      "[warmup %s] MLP 256 -> 512 -> 512 -> 10 (batch 64) + transformer block (dim 128, "
      "4 heads, 4x64 tokens), %d iterations, loss read every %d\n",
      dev.str().c_str(), iterations, every);
  kiln::tracer::set_enabled(false);  // eager reference: the same loop, tracer off
  std::vector<double> eager;
  for (int i = 0; i < 10; ++i) eager.push_back(iteration(i));
  kiln::tracer::set_enabled(true);
  kiln::tracer::reset();
  std::vector<double> times;
  // Compiles run in the background while the loop goes on eagerly, so a plan may land
  // after the iterations asked for (an NVRTC compile of the block takes about a second):
  // the loop runs on until none is in flight and the last landed iterations / 2
  // iterations ago (at most 60 s), so that the steady state below is one.
  const double start = now_us();
  int landed = -1;
  bool was_busy = false;
  for (int i = 0;; ++i) {
    const bool busy = kiln::tracer::Tracer::current().compiles_in_flight() > 0;
    if (was_busy && !busy) landed = i;  // installed at this iteration's walk
    was_busy = busy;
    if (i >= iterations && ((!busy && i - landed > iterations / 2) || now_us() - start > 60e6))
      break;
    times.push_back(iteration(i));
    if (i < iterations && (i + 1) % (iterations / 20) == 0) {
      std::printf("\r  [%-20s] %d/%d  %8.3f ms/iter  loss %.4f",
                  std::string(20 * (i + 1) / iterations, '#').c_str(), i + 1, iterations,
                  times.back() * 1e-3, last_loss);
      std::fflush(stdout);
    }
  }
  kiln::tracer::flush();
  if (dev.is_cuda()) kiln::cuda_context::synchronize(dev.index);
  std::vector<double> steady;  // the second half, after the last plan landed
  const int n = static_cast<int>(times.size());
  for (int i = std::max(n / 2, landed + 1); i < n; ++i)
    if ((i + 1) % every != 0) steady.push_back(times[i]);
  double before = median(eager), after = median(steady);
  std::printf(
      "\n[warmup %s] per-iteration time before warmup (eager, tracer off): median %.3f "
      "ms; first traced iterations: %.3f, %.3f, %.3f ms\n",
      dev.str().c_str(), before * 1e-3, times[0] * 1e-3, times[1] * 1e-3, times[2] * 1e-3);
  std::printf("[warmup %s] per-iteration time after warmup (steady state): median %.3f ms\n",
              dev.str().c_str(), after * 1e-3);
  std::printf("[warmup %s] speedup after warmup: %.2fx\n\n", dev.str().c_str(), before / after);
  std::printf("%s\n", kiln::tracer::explain().table().c_str());
}

// ---- 2. eager ops, CPU against GPU

// Median per-call time of f (which returns a tensor) over `reps` timed runs after one
// warm-up. Reading one element of the result with item() waits for everything it
// depends on: the GPU stream, and any work kiln's tracer has deferred.
template <class F>
double time_us(F&& f, int reps) {
  auto wait = [](const Tensor& t) { (void)t.flatten().select(0, 0).item<double>(); };
  wait(f());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    double t0 = now_us();
    wait(f());
    t.push_back(now_us() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// First n values of a tensor's first row, e.g. "[0.101, 0.0932, ...]".
std::string head(const Tensor& t, int n = 5) {
  std::vector<float> v = t.to(kiln::DType::Float32).contiguous().to_vector<float>();
  std::string s = "[";
  char buf[32];
  for (int i = 0; i < n && i < static_cast<int>(v.size()); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.4g", i ? ", " : "", v[i]);
    s += buf;
  }
  if (static_cast<int>(v.size()) > n) s += ", ...";
  return s + "]";
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  Tensor d = kiln::abs(a.cpu().to(kiln::DType::Float32) - b.cpu().to(kiln::DType::Float32));
  return d.numel() ? kiln::max(d).item<double>() : 0.0;
}

void report(const char* where, const Tensor& x, const Results& r) {
  std::printf("[%s] input  %s\n", where, x.meta_str().c_str());
  std::printf("[%s] logits %s  first row %s\n", where, r.logits.meta_str().c_str(),
              head(r.logits).c_str());
  std::printf("[%s] softmax %s  first row %s\n", where, r.probs.meta_str().c_str(),
              head(r.probs).c_str());
  std::printf("[%s] softmax row sums (should be 1): %s\n", where, head(r.row_sums).c_str());
  std::printf("[%s] argmax per row %s: %s\n", where, r.argmax.meta_str().c_str(),
              head(r.argmax, 8).c_str());
  std::printf("[%s] mean logit: %.6f\n", where, r.mean_logit.item<double>());
}

int run(int iterations) {
  warmup_demo(kiln::Device{}, iterations, 10);
  if (kiln::cuda_context::is_available()) warmup_demo(kiln::cuda_device(0), iterations, 10);
  const int64_t batch = 256, in = 512, hidden = 1024, out = 10;
  std::printf("kiln demo: eager MLP %lld -> %lld -> %lld -> %lld, batch %lld, float32\n",
              (long long)in, (long long)hidden, (long long)hidden, (long long)out,
              (long long)batch);

  kiln::manual_seed(1234);
  Mlp cpu_mlp = make_mlp(in, hidden, out);
  Tensor x = kiln::randn({batch, in});

  // ---- CPU
  Results cpu = run_workload(cpu_mlp, x);
  report("cpu", x, cpu);
  double t_mlp = time_us([&] { return cpu_mlp.forward(x); }, 20);
  double t_all = time_us([&] { return run_workload(cpu_mlp, x).mean_logit; }, 20);
  Tensor big = kiln::randn({1 << 22});
  double t_pw = time_us([&] { return kiln::relu(big * 2.0 + 1.0); }, 20);
  double gflop = 2.0 * batch * (in * hidden + hidden * hidden + hidden * out) * 1e-9;
  std::printf("[cpu] MLP forward: %.1f us (%.1f GFLOP/s); forward+softmax+reductions: %.1f us\n",
              t_mlp, gflop / (t_mlp * 1e-6), t_all);
  std::printf("[cpu] relu(x * 2 + 1) over 2^22 floats: %.2f ms\n", t_pw * 1e-3);

  // ---- error handling: bad input gives a clear error and the runtime keeps working
  try {
    (void)kiln::matmul(kiln::ones({2, 3}), kiln::ones({4, 5}));
  } catch (const kiln::Error& e) {
    std::printf("[cpu] a bad matmul throws as it should: %s\n", e.what());
  }

  // ---- GPU
  if (!kiln::cuda_context::is_available()) {
    std::printf("[gpu] no CUDA device (built with CUDA: %s); CPU only\n",
                kiln::cuda_context::built_with_cuda() ? "yes" : "no");
    std::printf("demo OK\n");
    return 0;
  }
  Device gpu = kiln::cuda_device(0);
  std::printf("[gpu] %d device(s); using cuda:0 = %s\n", kiln::cuda_context::device_count(),
              kiln::cuda_context::device_name(0).c_str());
  Mlp gpu_mlp = cpu_mlp.to(gpu);
  Tensor xg = x.to(gpu);
  Results g = run_workload(gpu_mlp, xg);
  report("gpu", xg, g);
  double g_mlp = time_us([&] { return gpu_mlp.forward(xg); }, 50);
  double g_all = time_us([&] { return run_workload(gpu_mlp, xg).mean_logit; }, 50);
  Tensor big_g = big.to(gpu);
  double g_pw = time_us([&] { return kiln::relu(big_g * 2.0 + 1.0); }, 50);
  std::printf("[gpu] MLP forward: %.1f us (%.1f GFLOP/s); forward+softmax+reductions: %.1f us\n",
              g_mlp, gflop / (g_mlp * 1e-6), g_all);
  std::printf("[gpu] relu(x * 2 + 1) over 2^22 floats: %.3f ms\n", g_pw * 1e-3);

  // ---- agreement: the GPU results against the CPU ones
  // cuBLAS may use a different summation order than the CPU BLAS: float32 tolerance.
  struct Check {
    const char* name;
    double diff, tol;
  };
  std::vector<Check> checks = {
      {"logits", max_abs_diff(cpu.logits, g.logits), 1e-3},
      {"softmax", max_abs_diff(cpu.probs, g.probs), 1e-4},
      {"row sums", max_abs_diff(cpu.row_sums, g.row_sums), 1e-4},
      {"mean logit", max_abs_diff(cpu.mean_logit, g.mean_logit), 1e-4},
      {"relu(x*2+1)", max_abs_diff(kiln::relu(big * 2.0 + 1.0), kiln::relu(big_g * 2.0 + 1.0)),
       1e-6},
  };
  bool ok = true;
  for (const Check& c : checks) {
    bool pass = c.diff <= c.tol;
    ok = ok && pass;
    std::printf("[check] %-12s max |cpu - gpu| = %.3g (tolerance %.0e) %s\n", c.name, c.diff, c.tol,
                pass ? "ok" : "MISMATCH");
  }
  // argmax may legitimately differ only where two probabilities are within rounding.
  Tensor same = kiln::eq(cpu.argmax, g.argmax.cpu());
  int64_t agree = kiln::sum(same).item<int64_t>();
  std::printf("[check] argmax agrees on %lld of %lld rows\n", (long long)agree, (long long)batch);
  std::puts(ok ? "demo OK" : "demo FAILED: CPU and GPU disagree");
  return ok ? 0 : 1;
}

}  // namespace

// Usage: kiln_demo [iterations of the warmup loop, default 60]
int main(int argc, char** argv) {
  try {
    int iterations = argc > 1 ? std::max(20, std::atoi(argv[1])) : 60;
    return run(iterations);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln demo failed: %s\n", e.what());
    return 1;
  }
}
