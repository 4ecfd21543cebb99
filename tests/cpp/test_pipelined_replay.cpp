// Pipelined replay (tracer/replay.h): a compiled trace whose backend launches in parts is
// launched part by part as the walk passes each part, and the rest at the boundary; a walk
// that leaves the trace after some parts ran keeps their values and runs the rest eagerly
// (in-place writes happen once). The backend here is the interpreter cut into parts of a
// few ops, so the tests run without a GPU; results are checked against float64 references.
#include <atomic>
#include <cmath>

#include "ops/api.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

// Counts what the tracer asked of the partial runs.
struct PartCounts {
  std::atomic<int> started{0}, launched{0}, finished{0}, abandoned{0};
  std::atomic<int> max_depth_at_launch{0};
};

class PartsBackend final : public tr::TraceBackend {
 public:
  explicit PartsBackend(size_t part_ops) : part_ops_(part_ops) {}
  std::unique_ptr<tr::Executable> compile(const tr::TraceProgram& program) override {
    return std::make_unique<Parts>(program, part_ops_, counts);
  }
  PartCounts counts;

 private:
  // The interpreter, launching ops [k * part_ops, (k + 1) * part_ops) as part k.
  class Parts final : public tr::Executable {
   public:
    Parts(tr::TraceProgram program, size_t part_ops, PartCounts& counts)
        : program_(std::move(program)), part_ops_(part_ops), counts_(counts) {}
    void run(const std::vector<Tensor>& externals, const std::vector<kiln::Scalar>& scalars,
             std::vector<Tensor>& values, const std::vector<bool>&) const override {
      tr::interpret(program_, program_.ops.size(), externals, scalars, values);
    }
    int kernel_count() const override { return static_cast<int>(program_.ops.size()); }
    const char* backend_name() const override { return "parts (test)"; }
    std::unique_ptr<tr::PartialRun> start_partial() const override {
      ++counts_.started;
      return std::make_unique<Run>(*this);
    }

   private:
    class Run final : public tr::PartialRun {
     public:
      explicit Run(const Parts& p) : p_(p) {}
      size_t next_launch_at() const override {
        const size_t next = done_ + p_.part_ops_;
        return next > p_.program_.ops.size() ? SIZE_MAX : next;
      }
      void launch_through(size_t depth, const std::vector<Tensor>& externals,
                          const std::vector<kiln::Scalar>& scalars,
                          const std::vector<std::weak_ptr<kiln::TensorImpl>>&) override {
        while (depth >= next_launch_at()) {
          const size_t end = next_launch_at();
          tr::interpret_from(p_.program_, done_, end, externals, scalars, values_);
          done_ = end;
          ++p_.counts_.launched;
          int seen = p_.counts_.max_depth_at_launch;
          while (static_cast<int>(depth) > seen &&
                 !p_.counts_.max_depth_at_launch.compare_exchange_weak(seen,
                                                                       static_cast<int>(depth))) {
          }
        }
      }
      void finish(const std::vector<Tensor>& externals, const std::vector<kiln::Scalar>& scalars,
                  std::vector<Tensor>& values, const std::vector<bool>&) override {
        tr::interpret_from(p_.program_, done_, p_.program_.ops.size(), externals, scalars, values_);
        values = values_;
        ++p_.counts_.finished;
      }
      size_t abandon(const std::vector<Tensor>&, std::vector<Tensor>& values) override {
        values = values_;
        ++p_.counts_.abandoned;
        return done_;
      }

     private:
      const Parts& p_;
      size_t done_ = 0;
      std::vector<Tensor> values_;
    };
    tr::TraceProgram program_;
    size_t part_ops_;
    PartCounts& counts_;
  };
  size_t part_ops_;
};

class PartsScope {
 public:
  explicit PartsScope(size_t part_ops) : backend(part_ops) { tr::register_backend_first(&backend); }
  ~PartsScope() { tr::unregister_backend(&backend); }
  PartsScope(const PartsScope&) = delete;
  PartsScope& operator=(const PartsScope&) = delete;
  PartsBackend backend;
};

class PipelinedReplay : public TracerTest {};

// A step of plain-loop training: forward, a loss read on the host (the boundary), and an
// SGD update written in place into the weight.
double train_step(Tensor& w, const Tensor& x, const Tensor& y, double lr) {
  Tensor h = kiln::tanh(kiln::matmul(x, w));
  Tensor err = h - y;
  Tensor grad = kiln::matmul(x.t(), err * (1 - h * h)) * (2.0 / static_cast<double>(x.size(0)));
  w.sub_(grad * lr);
  return kiln::mean(err * err).item<double>();
}

// The same step in float64 on the host.
double reference_step(Host& w, const Host& x, const Host& y, double lr) {
  const int64_t n = x.sizes[0], k = x.sizes[1], m = w.sizes[1];
  std::vector<double> h(n * m), e(n * m);
  double loss = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += x.v[i * k + q] * w.v[q * m + j];
      h[i * m + j] = std::tanh(s);
      e[i * m + j] = h[i * m + j] - y.v[i * m + j];
      loss += e[i * m + j] * e[i * m + j];
    }
  for (int64_t q = 0; q < k; ++q)
    for (int64_t j = 0; j < m; ++j) {
      double g = 0;
      for (int64_t i = 0; i < n; ++i)
        g += x.v[i * k + q] * e[i * m + j] * (1 - h[i * m + j] * h[i * m + j]);
      w.v[q * m + j] -= lr * g * 2.0 / static_cast<double>(n);
    }
  return loss / static_cast<double>(n * m);
}

}  // namespace

TEST_F(PipelinedReplay, PartsLaunchWhileTheWalkGoesOnAndResultsMatch) {
  PartsScope parts(3);
  Tensor x = random_tensor({16, 8}), y = random_tensor({16, 4});
  Tensor w = random_tensor({8, 4});
  Host wr = read(w);
  const Host xr = read(x), yr = read(y);
  for (int step = 0; step < 10; ++step) {
    const double loss = train_step(w, x, y, 0.1);
    const double want = reference_step(wr, xr, yr, 0.1);
    ASSERT_NEAR(loss, want, 1e-5 * std::max(1.0, std::abs(want))) << "step " << step;
    ASSERT_TRUE(all_close(w, wr, Tol{1e-5, 1e-5})) << "step " << step;
  }
  const tr::ExplainReport r = tr::explain();
  ASSERT_FALSE(r.traces.empty()) << r.table();
  EXPECT_EQ(r.traces[0].backend, "parts (test)");
  EXPECT_GE(parts.backend.counts.finished, 3) << r.table();
  // Parts ran before the walk reached the trace's end (it is longer than two parts).
  EXPECT_GE(parts.backend.counts.launched, 2 * parts.backend.counts.finished);
  EXPECT_EQ(parts.backend.counts.abandoned, 0);
}

TEST_F(PipelinedReplay, AWalkLeavingTheTraceAfterSomePartsKeepsTheirWritesOnce) {
  PartsScope parts(2);
  Tensor x = random_tensor({16, 8}), y = random_tensor({16, 4});
  Tensor w = random_tensor({8, 4});
  Host wr = read(w);
  const Host xr = read(x), yr = read(y);
  for (int step = 0; step < 12; ++step) {
    // From step 8 on the step takes another turn after the update (a different op
    // before the host read): the walk leaves the compiled path late, after parts ran,
    // including the in-place update.
    double loss;
    if (step < 8) {
      loss = train_step(w, x, y, 0.05);
    } else {
      Tensor h = kiln::tanh(kiln::matmul(x, w));
      Tensor err = h - y;
      Tensor grad = kiln::matmul(x.t(), err * (1 - h * h)) * (2.0 / static_cast<double>(x.size(0)));
      w.sub_(grad * 0.05);
      loss = kiln::mean(kiln::abs(err * err)).item<double>();  // abs: the new turn
    }
    const double want = reference_step(wr, xr, yr, 0.05);
    ASSERT_NEAR(loss, want, 1e-5 * std::max(1.0, std::abs(want))) << "step " << step;
    ASSERT_TRUE(all_close(w, wr, Tol{1e-5, 1e-5})) << "step " << step;
  }
  EXPECT_GE(parts.backend.counts.abandoned, 1) << tr::explain().table();
}

TEST_F(PipelinedReplay, ValuesHeldFromTheLaunchedPartsAreRight) {
  PartsScope parts(2);
  Tensor a = random_tensor({32});
  std::vector<Tensor> kept;
  for (int i = 0; i < 8; ++i) {
    Tensor b = kiln::exp(a * 0.5);
    Tensor c = b + 1.0;
    Tensor d = kiln::sqrt(c) * 2.0;
    kept.push_back(b);  // held across the boundary: an early part's value
    (void)kiln::sum(d).item<double>();
  }
  const Host ar = read(a);
  for (const Tensor& b : kept)
    EXPECT_TRUE(all_close(b, map(ar, [](double v) { return std::exp(v * 0.5); }),
                          tol_pointwise(DType::Float32)));
  EXPECT_GE(parts.backend.counts.launched, 1);
}

// TraceProgram::held (a value a plan launched in parts keeps until the run ends): values
// the user keeps past their last reader are held; the activations autograd saves for
// backward are not (autograd drops each after the backward op reading it ran), so a GPU
// plan may reuse their bytes within the run (the GPT step's arena held both micro-steps'
// activations). The compiled program is captured from the backend.
TEST_F(PipelinedReplay, OnlyValuesTheUserKeepsPastTheirLastReaderAreHeld) {
  struct Capture final : tr::TraceBackend {
    std::unique_ptr<tr::Executable> compile(const tr::TraceProgram& program) override {
      if (!held.empty() || program.ops.size() < 200) return nullptr;
      program_ops = program.ops;
      held = program.held;
      return nullptr;  // the trace stays eager: only its program matters here
    }
    std::vector<tr::TraceOp> program_ops;
    std::vector<bool> held;
  } capture;
  tr::register_backend_first(&capture);
  std::vector<Tensor> w;
  for (int k = 0; k < 40; ++k) {
    w.push_back(random_tensor({16, 16}) * 0.2);
    w.back().set_requires_grad(true);
  }
  const Tensor x = random_tensor({8, 16});
  Tensor kept;  // the first micro-step's loss, kept through the second
  for (int step = 0; step < 4 && capture.held.empty(); ++step) {
    tr::Region region;
    for (int micro = 0; micro < 2; ++micro) {
      Tensor h = x;
      for (const Tensor& wk : w) h = kiln::tanh(kiln::matmul(h, wk));
      Tensor loss = kiln::sum(h);
      loss.backward();
      if (micro == 0) kept = loss;
    }
  }
  tr::unregister_backend(&capture);
  ASSERT_FALSE(capture.held.empty()) << tr::explain().table();
  int held_sums = 0, held_tanh = 0, tanh_count = 0;
  for (size_t i = 0; i < capture.program_ops.size() && i < capture.held.size(); ++i) {
    const kiln::OpId op = capture.program_ops[i].op;
    if (op == kiln::OpId::Sum) held_sums += capture.held[i];
    if (op == kiln::OpId::Tanh) {
      ++tanh_count;
      held_tanh += capture.held[i];
    }
  }
  // The second micro-step's loss, in scope through its backward (the first is live at the
  // boundary: `kept`).
  EXPECT_EQ(held_sums, 1);
  EXPECT_EQ(tanh_count, 160);  // 80 forward, 80 in the backward of tanh
  // Of the 80 forward tanh values (all saved for backward, all still alive 64 ops after
  // they were made), only each micro-step's last one is held: `h` keeps it in scope
  // through that micro-step's backward.
  EXPECT_EQ(held_tanh, 2);
}
