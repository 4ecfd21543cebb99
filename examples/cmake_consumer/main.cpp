// Uses an installed kiln (see CMakeLists.txt): an eager computation and a traced loop,
// each checked against the same arithmetic written as a plain C++ loop. Exits 1 on a
// mismatch, 2 on an exception.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "ops/api.h"
#include "runtime/tensor.h"
#include "tracer/api.h"

namespace {

int failures = 0;

void check(const char* what, double got, double want, double tol) {
  const bool ok = std::fabs(got - want) <= tol * (1.0 + std::fabs(want));
  std::printf("  %-28s kiln %.6f  plain C++ %.6f  %s\n", what, got, want, ok ? "ok" : "MISMATCH");
  if (!ok) ++failures;
}

// Eager: y = softmax(relu(x @ w^T + b)) over rows, then row sums and the total of y * y.
void eager_example() {
  std::printf("eager: softmax(relu(linear(x, w, b)))\n");
  constexpr int64_t rows = 4, in = 8, out = 5;
  std::vector<float> xs(rows * in), ws(out * in), bs(out);
  for (int64_t i = 0; i < rows * in; ++i) xs[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (int64_t i = 0; i < out * in; ++i) ws[i] = 0.05f * static_cast<float>(i % 11) - 0.2f;
  for (int64_t i = 0; i < out; ++i) bs[i] = 0.1f * static_cast<float>(i);

  kiln::Tensor x = kiln::from_vector(xs, {rows, in});
  kiln::Tensor w = kiln::from_vector(ws, {out, in});
  kiln::Tensor b = kiln::from_vector(bs, {out});
  kiln::Tensor y = kiln::softmax(kiln::relu(kiln::linear(x, w, b)), -1);
  std::printf("  y: %s\n", y.meta_str().c_str());
  const std::vector<double> got = y.to_vector<double>();

  // The same in plain C++ (double).
  std::vector<double> want(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -1e300, z = 0;
    for (int64_t o = 0; o < out; ++o) {
      double acc = bs[o];
      for (int64_t k = 0; k < in; ++k) acc += double(xs[r * in + k]) * ws[o * in + k];
      want[r * out + o] = acc > 0 ? acc : 0;
      mx = std::max(mx, want[r * out + o]);
    }
    for (int64_t o = 0; o < out; ++o) z += (want[r * out + o] = std::exp(want[r * out + o] - mx));
    for (int64_t o = 0; o < out; ++o) want[r * out + o] /= z;
  }
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  check("max |y - reference|", max_err, 0.0, 1e-5);
  check("sum(y) (rows sum to 1)", kiln::sum(y).item<double>(), double(rows), 1e-5);
  double sq = 0;
  for (double v : want) sq += v * v;
  check("sum(y * y)", kiln::sum(y * y).item<double>(), sq, 1e-5);
}

// Traced: the same step runs in a tracer region each iteration; after the warmup it is
// compiled and replayed. The state is read back only at the end.
void traced_example() {
  std::printf("traced: 12 iterations of s = tanh(s * 0.9 + x) * 0.5 + 0.1 in a region\n");
  constexpr int64_t n = 64;
  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = std::sin(0.3f * static_cast<float>(i));
  kiln::Tensor x = kiln::from_vector(xs, {n});
  kiln::Tensor s = kiln::zeros({n});
  auto step = kiln::tracer::compile(
      [](const kiln::Tensor& s, const kiln::Tensor& x) {
        return kiln::tanh(s * 0.9 + x) * 0.5 + 0.1;
      },
      {.name = "consumer_step", .warmup = 2});
  constexpr int iters = 12;
  for (int it = 0; it < iters; ++it) {
    s = step(s, x);
    // Hot after 2 iterations, it compiles on kiln's background thread while the loop runs
    // on eagerly; waiting here makes the counts below exact (a loop never needs it).
    if (it == 1) kiln::tracer::wait_for_compiles();
  }
  const std::vector<double> got = s.to_vector<double>();

  std::vector<double> want(n, 0.0);
  for (int it = 0; it < iters; ++it)
    for (int64_t i = 0; i < n; ++i) want[i] = std::tanh(want[i] * 0.9 + xs[i]) * 0.5 + 0.1;
  double max_err = 0, total = 0, want_total = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_err = std::max(max_err, std::fabs(got[i] - want[i]));
    total += got[i];
    want_total += want[i];
  }
  check("max |s - reference|", max_err, 0.0, 1e-5);
  check("sum(s)", total, want_total, 1e-5);

  const kiln::tracer::ExplainReport report = kiln::tracer::explain();
  std::printf("  traces compiled: %zu, ops replayed: %lld\n", report.traces.size(),
              static_cast<long long>(report.ops_replayed));
  if (kiln::tracer::enabled() && (report.traces.empty() || report.ops_replayed == 0)) {
    std::printf("  MISMATCH: the tracer is on but nothing was compiled and replayed\n");
    ++failures;
  }
  std::printf("%s", report.table().c_str());
}

}  // namespace

int main() {
  try {
    eager_example();
    traced_example();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_consumer: error: %s\n", e.what());
    return 2;
  }
  if (failures != 0) {
    std::printf("kiln_consumer: %d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("kiln_consumer: all checks passed\n");
  return 0;
}
