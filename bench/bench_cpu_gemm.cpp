// Standalone CPU GEMM benchmark on the model shapes kiln runs (docs/cpu_matmul.md):
// GPT-small linears forward and backward (A B^T, A B, A^T B), attention's batched
// q @ k^T and p @ v on 4-D views read in place (strided rows, transposed k), the LSTM
// cell's gate products and mlp3 at batch 128 and 4096. Row-major float32 throughout.
//
// One library per binary, picked when compiling (bench/bench_cpu_gemm.sh builds them all):
//   -DBENCH_CBLAS        cblas_sgemm (OpenBLAS, BLIS, MKL)
//   -DBENCH_DNNL_SGEMM   dnnl_sgemm, oneDNN's row-major GEMM (declared here: the same
//                        signature in oneDNN 2.x and 3.x, and PyPI's wheels carry no headers)
//   -DBENCH_DNNL_MATMUL  oneDNN's matmul primitive (dnnl.hpp 2.x), one primitive per shape
//                        with the batch and strides in its memory descriptors
// Threads are the library's own, set by the caller's environment (OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS, ...). Prints one line per shape: name, per-call microseconds
// (median of 7 timed loops of BENCH_GEMM_LOOP_S seconds each, default 0.1), GFLOP/s and
// the best of the 7 loops, and the median process CPU time per call (the fair figure for
// 1-thread runs on a shared machine).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#if defined(BENCH_CBLAS) && defined(BENCH_MKL)
#include <mkl_cblas.h>
#elif defined(BENCH_CBLAS)
#include <cblas.h>
#elif defined(BENCH_DNNL_SGEMM)
extern "C" int dnnl_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                          float* c, int64_t ldc);
#elif defined(BENCH_DNNL_MATMUL)
#include <dnnl.hpp>
#include <map>
#else
#error "pick a library: -DBENCH_CBLAS, -DBENCH_DNNL_SGEMM or -DBENCH_DNNL_MATMUL"
#endif

namespace {

// C[b] (m x n, ldc, batch stride m*n) = op(A[b]) @ op(B[b]); op transposes when the flag is
// set. A[b] starts at a + b * a_batch (elements), B[b] likewise.
struct Case {
  std::string name;
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb;
  int64_t a_batch, b_batch;  // element offset between batch entries
  int64_t a_size, b_size;    // elements to allocate
};

Case plain(const std::string& name, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  return Case{name, 1, m, n, k, ta, tb, lda, ldb, 0, 0, m * k, k * n};
}

// Attention on [B, T, H, D] storage viewed as [B, H, T, D] (the split of a fused qkv
// projection: row stride = row_width), q @ k^T: m = n = T, k = D.
Case attention_qk(const std::string& name, int64_t B, int64_t H, int64_t T, int64_t D,
                  int64_t row_width) {
  // Batch entry (b, h) starts at b * T * row_width + h * D; the benchmark walks entries
  // with a fixed stride, so take heads as the inner batch and use stride D (valid when
  // row_width == H * D for one tensor) or T * D for contiguous [B, H, T, D].
  const bool heads_inner = row_width != D;
  const int64_t step = heads_inner ? D : T * D;
  const int64_t size = heads_inner ? B * T * row_width : B * H * T * D;
  return Case{name, B * H, T, T, D, false, true, row_width, row_width, step, step, size, size};
}

Case attention_pv(const std::string& name, int64_t B, int64_t H, int64_t T, int64_t D,
                  int64_t row_width) {
  const bool heads_inner = row_width != D;
  const int64_t step = heads_inner ? D : T * D;
  const int64_t size = heads_inner ? B * T * row_width : B * H * T * D;
  return Case{name, B * H, T, D, T, false, false, T, row_width, T * T, step, B * H * T * T, size};
}

std::vector<Case> model_cases() {
  std::vector<Case> cases;
  // GPT small: 2 layers, 128 wide, batch*seq rows (8*64 = 512), MLP 512, vocab 65.
  for (int64_t rows : {512}) {
    const std::string r = std::to_string(rows);
    cases.push_back(plain("gpt qkv fwd x@W^T " + r + "x384x128", rows, 384, 128, false, true));
    cases.push_back(plain("gpt proj fwd x@W^T " + r + "x128x128", rows, 128, 128, false, true));
    cases.push_back(plain("gpt mlp up fwd " + r + "x512x128", rows, 512, 128, false, true));
    cases.push_back(plain("gpt mlp down fwd " + r + "x128x512", rows, 128, 512, false, true));
    cases.push_back(plain("gpt head fwd " + r + "x65x128", rows, 65, 128, false, true));
    cases.push_back(plain("gpt mlp up dX dY@W " + r + "x128x512", rows, 128, 512, false, false));
    cases.push_back(plain("gpt mlp up dW dY^T@X 512x128x" + r, 512, 128, rows, true, false));
    cases.push_back(plain("gpt head dW dY^T@X 65x128x" + r, 65, 128, rows, true, false));
  }
  // Attention 2x8x256x64: contiguous [B,H,T,D] (the cpu_workloads row) and the GPT
  // layout (heads split from a [B,T,3*H*D] qkv projection: row stride 3*512 = 1536).
  cases.push_back(attention_qk("attn q@k^T 2x8x256x64 contiguous", 2, 8, 256, 64, 64));
  cases.push_back(attention_pv("attn p@v 2x8x256x64 contiguous", 2, 8, 256, 64, 64));
  cases.push_back(attention_qk("attn q@k^T 2x8x256x64 qkv view", 2, 8, 256, 64, 1536));
  cases.push_back(attention_pv("attn p@v 2x8x256x64 qkv view", 2, 8, 256, 64, 1536));
  // LSTM cell: x @ wi and h @ wh, 64 x 1024 x 256; backward dX = dG @ wi^T.
  cases.push_back(plain("lstm x@wi 64x1024x256", 64, 1024, 256, false, false));
  cases.push_back(plain("lstm dG@wi^T 64x256x1024", 64, 256, 1024, false, true));
  cases.push_back(plain("lstm dW x^T@dG 256x1024x64", 256, 1024, 64, true, false));
  // mlp3: x [B,1] @ w1 [1,1024], h @ w2 [1024,1024], h @ w3 [1024,1].
  for (int64_t b : {128, 4096}) {
    const std::string s = std::to_string(b);
    cases.push_back(plain("mlp3 l1 " + s + "x1024x1", b, 1024, 1, false, false));
    cases.push_back(plain("mlp3 l2 " + s + "x1024x1024", b, 1024, 1024, false, false));
    cases.push_back(plain("mlp3 l3 " + s + "x1x1024", b, 1, 1024, false, false));
  }
  return cases;
}

#if defined(BENCH_DNNL_MATMUL)
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

Matmul make_matmul(const Case& c) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  // A [batch, m, k]: element (r, i) at r*lda or i*lda when transposed.
  // (oneDNN takes a zero batch stride as broadcast and runs its reference kernel.)
  const int64_t a_step = c.batch == 1 ? c.m * c.k : c.a_batch;
  const int64_t b_step = c.batch == 1 ? c.k * c.n : c.b_batch;
  const dims a_strides = c.trans_a ? dims{a_step, 1, c.lda} : dims{a_step, c.lda, 1};
  const dims b_strides = c.trans_b ? dims{b_step, 1, c.ldb} : dims{b_step, c.ldb, 1};
  Matmul mm;
  mm.a = dnnl::memory::desc(dims{c.batch, c.m, c.k}, dt::f32, a_strides);
  mm.b = dnnl::memory::desc(dims{c.batch, c.k, c.n}, dt::f32, b_strides);
  mm.c = dnnl::memory::desc(dims{c.batch, c.m, c.n}, dt::f32, dims{c.m * c.n, c.n, 1});
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd(engine(), mm.a, mm.b, mm.c);
#else
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.a, mm.b, mm.c), engine());
#endif
  mm.prim = dnnl::matmul(pd);
  return mm;
}
#endif

struct Runner {
  const Case& c;
  std::vector<float> a, b, out;
#if defined(BENCH_DNNL_MATMUL)
  Matmul mm;
  dnnl::stream stream{engine()};
#endif

  explicit Runner(const Case& cs) : c(cs) {
    std::mt19937 gen(42);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    a.resize(static_cast<size_t>(c.a_size));
    b.resize(static_cast<size_t>(c.b_size));
    out.resize(static_cast<size_t>(c.batch * c.m * c.n));
    for (float& x : a) x = dist(gen);
    for (float& x : b) x = dist(gen);
#if defined(BENCH_DNNL_MATMUL)
    mm = make_matmul(c);
#endif
  }

  void run() {
#if defined(BENCH_DNNL_MATMUL)
    dnnl::memory ma(mm.a, engine(), a.data()), mb(mm.b, engine(), b.data()),
        mc(mm.c, engine(), out.data());
    mm.prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
#else
    for (int64_t i = 0; i < c.batch; ++i) {
      const float* pa = a.data() + i * c.a_batch;
      const float* pb = b.data() + i * c.b_batch;
      float* pc = out.data() + i * c.m * c.n;
#if defined(BENCH_CBLAS)
      cblas_sgemm(CblasRowMajor, c.trans_a ? CblasTrans : CblasNoTrans,
                  c.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(c.m),
                  static_cast<int>(c.n), static_cast<int>(c.k), 1.f, pa, static_cast<int>(c.lda),
                  pb, static_cast<int>(c.ldb), 0.f, pc, static_cast<int>(c.n));
#else
      dnnl_sgemm(c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N', c.m, c.n, c.k, 1.f, pa, c.lda, pb,
                 c.ldb, 0.f, pc, c.n);
#endif
    }
#endif
  }

  // Largest |C - reference| over a few sampled entries, reference in double.
  double check() {
    run();
    double worst = 0;
    std::mt19937 gen(7);
    for (int s = 0; s < 16; ++s) {
      const int64_t i = gen() % c.batch, r = gen() % c.m, col = gen() % c.n;
      double ref = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double av = a[i * c.a_batch + (c.trans_a ? p * c.lda + r : r * c.lda + p)];
        const double bv = b[i * c.b_batch + (c.trans_b ? col * c.ldb + p : p * c.ldb + col)];
        ref += av * bv;
      }
      worst = std::max(worst, std::abs(ref - out[(i * c.m + r) * c.n + col]));
    }
    return worst;
  }
};

// CPU time of the whole process (all its threads): on a shared machine, a 1-thread run's
// CPU time per call is the figure that other processes' time slices do not inflate.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  const char* loop_env = std::getenv("BENCH_GEMM_LOOP_S");
  const double loop_s = loop_env ? std::atof(loop_env) : 0.1;
  for (const Case& c : model_cases()) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    Runner runner(c);
    const double err = runner.check();
    for (int i = 0; i < 3; ++i) runner.run();
    auto t0 = std::chrono::steady_clock::now();
    int64_t calls = 0;
    while (seconds_since(t0) < 0.02) {
      runner.run();
      ++calls;
    }
    const int64_t loop = std::max<int64_t>(1, static_cast<int64_t>(calls * loop_s / 0.02));
    std::vector<double> per_call, cpu_per_call;
    for (int rep = 0; rep < 7; ++rep) {
      const double cpu0 = process_cpu_seconds();
      t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < loop; ++i) runner.run();
      per_call.push_back(seconds_since(t0) / static_cast<double>(loop));
      cpu_per_call.push_back((process_cpu_seconds() - cpu0) / static_cast<double>(loop));
    }
    std::sort(per_call.begin(), per_call.end());
    std::sort(cpu_per_call.begin(), cpu_per_call.end());
    const double us = per_call[3] * 1e6;
    const double flops = 2.0 * static_cast<double>(c.batch * c.m * c.n * c.k);
    std::printf("%-40s %10.2f us %8.1f GFLOP/s  best %10.2f us  cpu %10.2f us  maxerr %.1e\n",
                c.name.c_str(), us, flops / us * 1e-3, per_call[0] * 1e6, cpu_per_call[3] * 1e6,
                err);
    std::fflush(stdout);
  }
  return 0;
}
