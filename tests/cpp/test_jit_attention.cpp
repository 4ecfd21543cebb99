// The JIT's `attention` pass (jit/attention_rewrite.h): attention written out by hand,
// softmax(q @ k^T * scale [+ mask]) @ v, traced and compiled, becomes one fused attention
// step where that is safe, and the results equal kiln's eager ones on fresh random inputs.
// On the CPU (the pass switched on by tracer::config().cpu_attention): no mask, scale by
// mul and by div, the scale on q, broadcast batch dims, additive masks of [L, S] and
// [B, 1, L, S], bool masks, the causal mask from aranges in both forms (where(le(cols,
// rows), s, -inf) and masked_fill(gt(cols, rows), -inf)), two layers in one trace, batch
// sizes the trace was not compiled for, float64 and bfloat16; the run-time checks (a fill
// that is not -inf, aranges that do not start at 0) falling back to the replaced ops; the
// patterns it must leave alone (the softmax held by the user or read elsewhere, the
// scores read elsewhere, softmax over another dim, a scale tensor); the pass switched
// off by name, and off by default on the CPU. On a GPU (skipped without one): the
// workloads' pattern and the causal one, float32 and bfloat16, rewritten and equal to
// eager on the GPU and on the CPU.
#include <cmath>

#include "ops/api.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Scalar;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

bool has_note(const tr::TraceReport& t, const std::string& part) {
  for (const std::string& n : t.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

const char* kFused = "as one fused attention op";

// Runs f four times in a region (two warmups, the compile, replays); checks that one trace
// compiled and replayed. Returns the last result and the trace's report.
Tensor traced(const std::function<Tensor()>& f, tr::TraceReport* report, const char* backend) {
  Tensor out;
  for (int i = 0; i < 4; ++i) {
    tr::Region region;
    out = f();
  }
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(r.traces.size(), 1u) << r.table();
  if (r.traces.empty()) return out;
  const tr::TraceReport& t = r.traces[0];
  EXPECT_EQ(t.backend, backend) << r.table();
  EXPECT_GE(t.replays, 1) << r.table();
  for (const std::string& n : t.notes) EXPECT_EQ(n.find("fell back"), std::string::npos) << n;
  *report = t;
  return out;
}

Tensor scores(const Tensor& q, const Tensor& k) { return kiln::matmul(q, k.transpose(-2, -1)); }

// cols [1, S] and rows [L, 1] of aranges (starting at `start`), as kiln's tril does.
Tensor cols_of(int64_t S, int64_t start = 0, Device d = kiln::kCPU) {
  return kiln::arange(Scalar(start), Scalar(start + S), 1, {DType::Int64, d}).unsqueeze(0);
}
Tensor rows_of(int64_t L, Device d = kiln::kCPU) {
  return kiln::arange(L, {DType::Int64, d}).unsqueeze(1);
}

class JitAttention : public LlvmJitTest {
 protected:
  void SetUp() override {
    LlvmJitTest::SetUp();
    tr::set_enabled(false);  // only regions trace
    tr::config().cpu_attention = true;
  }

  // f traced on the CPU equals f run eagerly; the attention pass rewrote it (or not).
  void expect(const std::function<Tensor()>& f, bool rewritten, const std::string& how = "",
              Tol tol = Tol{2e-5, 2e-6}) {
    tr::reset();
    tr::TraceReport report;
    const Tensor got = traced(f, &report, "llvm");
    EXPECT_EQ(has_note(report, kFused), rewritten) << tr::explain().table();
    if (rewritten && !how.empty()) {
      EXPECT_TRUE(has_note(report, how)) << tr::explain().table();
    }
    const Tensor want = eager(f);
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_TRUE(all_close(got, read(want), tol)) << tr::explain().table();
  }
};

TEST_F(JitAttention, WithoutMaskIsOneStep) {
  Tensor q = random_tensor({2, 4, 24, 16}), k = random_tensor({2, 4, 40, 16});
  Tensor v = random_tensor({2, 4, 40, 12});
  expect([=] { return kiln::matmul(kiln::softmax(scores(q, k) * 0.25, -1), v); }, true);
  EXPECT_EQ(tr::explain().traces[0].kernels, 1) << tr::explain().table();
  expect([=] { return kiln::matmul(kiln::softmax(scores(q, k) / 4.0, -1), v); }, true);
  expect([=] { return kiln::matmul(kiln::softmax(0.3 * scores(q, k), -1), v); }, true);
  // The scale on q: the pattern has no scale (1), q * 0.25 stays a kernel of its own.
  expect([=] { return kiln::matmul(kiln::softmax(scores(q * 0.25, k), -1), v); }, true);
  // k given already transposed ([..., E, S]): the step reads its transpose back.
  Tensor kt = random_tensor({2, 4, 16, 40});
  expect([=] { return kiln::matmul(kiln::softmax(kiln::matmul(q, kt) * 0.25, -1), v); }, true);
  // Broadcast batch dims: keys shared by every batch entry and head, values per head.
  Tensor k2 = random_tensor({40, 16}), vh = random_tensor({4, 40, 12});
  expect([=] { return kiln::matmul(kiln::softmax(scores(q, k2) * 0.25, -1), vh); }, true);
  // 3-D inputs, and the output used further in the trace.
  Tensor q3 = random_tensor({6, 20, 8}), k3 = random_tensor({6, 20, 8}),
         v3 = random_tensor({6, 20, 8});
  expect([=] { return kiln::relu(kiln::matmul(kiln::softmax(scores(q3, k3) * 0.3, -1), v3)); },
         true);
}

TEST_F(JitAttention, AdditiveAndBoolMasks) {
  Tensor q = random_tensor({2, 3, 32, 16}), k = random_tensor({2, 3, 32, 16});
  Tensor v = random_tensor({2, 3, 32, 16});
  Tensor mask = random_tensor({32, 32}), mask4 = random_tensor({2, 1, 32, 32});
  expect([=] { return kiln::matmul(kiln::softmax(scores(q, k) * 0.25 + mask, -1), v); }, true,
         "(additive mask)");
  expect([=] { return kiln::matmul(kiln::softmax(mask4 + scores(q, k) * 0.25, -1), v); }, true,
         "(additive mask)");
  Tensor keep = kiln::gt(random_tensor({2, 1, 32, 32}), Scalar(-0.5));
  expect(
      [=] {
        return kiln::matmul(
            kiln::softmax(kiln::where(keep, scores(q, k) * 0.25, Scalar(-INFINITY)), -1), v);
      },
      true, "(bool mask)");
  // masked_fill: true drops the key.
  Tensor drop = kiln::lt(random_tensor({32, 32}), Scalar(-0.5));
  expect(
      [=] {
        return kiln::matmul(
            kiln::softmax(kiln::where(drop, Scalar(-INFINITY), scores(q, k) / 4.0), -1), v);
      },
      true, "(bool mask)");
}

TEST_F(JitAttention, CausalMaskFromAranges) {
  Tensor q = random_tensor({2, 4, 48, 16}), k = random_tensor({2, 4, 48, 16});
  Tensor v = random_tensor({2, 4, 48, 16});
  // kiln's own composite: where(le(cols, rows), s, -inf).
  expect([=] { return kiln::attention_composite(q, k, v, Tensor(), true, 0.25); }, true,
         "(causal)");
  // GPT's masked_fill(gt(cols, rows), -inf), the mask made before the scores.
  expect(
      [=] {
        const Tensor future = kiln::gt(cols_of(48), rows_of(48));
        const Tensor att = scores(q, k) * (1.0 / std::sqrt(16.0));
        return kiln::matmul(kiln::softmax(kiln::where(future, Scalar(-INFINITY), att), -1), v);
      },
      true, "(causal)");
  // L != S: key j is dropped past query i (top-left aligned).
  Tensor q2 = random_tensor({3, 20, 16});
  expect(
      [=] {
        const Tensor att = scores(q2, k.reshape({8, 48, 16}).narrow(0, 0, 3)) * 0.25;
        return kiln::matmul(
            kiln::softmax(kiln::where(kiln::gt(cols_of(48), rows_of(20)), Scalar(-INFINITY), att),
                          -1),
            v.reshape({8, 48, 16}).narrow(0, 0, 3));
      },
      true, "(causal)");
}

TEST_F(JitAttention, TwoLayersAndNewSizes) {
  // Two attention layers in one trace, the second reading the first's output: two steps.
  Tensor q = random_tensor({2, 4, 32, 16}), k = random_tensor({2, 4, 32, 16});
  Tensor v = random_tensor({2, 4, 32, 16});
  auto layer = [](const Tensor& x, const Tensor& kk, const Tensor& vv) {
    return kiln::matmul(kiln::softmax(scores(x, kk) * 0.25, -1), vv);
  };
  expect([=] { return layer(layer(q, k, v) + q, k, v); }, true);
  const tr::ExplainReport two = tr::explain();
  int fused = 0;
  for (const std::string& n : two.traces.at(0).notes) fused += n.find(kFused) != std::string::npos;
  EXPECT_EQ(fused, 2) << two.table();
  EXPECT_EQ(two.traces.at(0).kernels, 3) << two.table();  // 2 steps, the add
  // A batch size the trace was not compiled for (a symbolic size): rewritten there too.
  tr::reset();
  auto f = [](const Tensor& qq, const Tensor& kk, const Tensor& vv) {
    return kiln::matmul(kiln::softmax(scores(qq, kk) / 4.0, -1), vv);
  };
  for (int64_t batch : {2, 2, 2, 3, 5, 3}) {
    SCOPED_TRACE(batch);
    Tensor qb = random_tensor({batch, 4, 32, 16}), kb = random_tensor({batch, 4, 32, 16});
    Tensor vb = random_tensor({batch, 4, 32, 16});
    Tensor got;
    {
      tr::Region region;
      got = f(qb, kb, vb);
    }
    EXPECT_TRUE(all_close(got, read(eager([&] { return f(qb, kb, vb); })), Tol{2e-5, 2e-6}));
  }
  const tr::ExplainReport r = tr::explain();
  ASSERT_FALSE(r.traces.empty()) << r.table();
  for (const tr::TraceReport& t : r.traces) EXPECT_TRUE(has_note(t, kFused)) << r.table();
}

TEST_F(JitAttention, RunTimeChecksFallBackToTheReplacedOps) {
  Tensor q = random_tensor({2, 2, 24, 16}), k = random_tensor({2, 2, 24, 16});
  Tensor v = random_tensor({2, 2, 24, 16});
  // A fill that is not -inf: the step computes the ops it replaced (the causal kernel
  // would give another result).
  expect(
      [=] {
        const Tensor att = scores(q, k) * 0.25;
        return kiln::matmul(
            kiln::softmax(kiln::where(kiln::gt(cols_of(24), rows_of(24)), Scalar(-2.0), att), -1),
            v);
      },
      true, "(causal)");
  // Columns counted from 3: not the causal mask.
  expect(
      [=] {
        const Tensor att = scores(q, k) * 0.25;
        return kiln::matmul(
            kiln::softmax(
                kiln::where(kiln::gt(cols_of(24, 3), rows_of(24)), Scalar(-INFINITY), att), -1),
            v);
      },
      true, "(causal)");
  // The fill changes from call to call (a run-time scalar): no recompile, each right.
  Tensor mask = kiln::gt(cols_of(24), rows_of(24));
  for (double fill : {-double(INFINITY), -1.5, -double(INFINITY)}) {
    SCOPED_TRACE(fill);
    auto f = [=] {
      return kiln::matmul(kiln::softmax(kiln::where(mask, Scalar(fill), scores(q, k) * 0.25), -1),
                          v);
    };
    Tensor got;
    {
      tr::Region region;
      got = f();
    }
    EXPECT_TRUE(all_close(got, read(eager(f)), Tol{2e-5, 2e-6}));
  }
}

TEST_F(JitAttention, OtherDtypes) {
  Tensor q = random_tensor({2, 2, 24, 16}, DType::Float64);
  Tensor k = random_tensor({2, 2, 24, 16}, DType::Float64);
  Tensor v = random_tensor({2, 2, 24, 16}, DType::Float64);
  expect([=] { return kiln::attention_composite(q, k, v, Tensor(), true, 0.25); }, true, "(causal)",
         Tol{1e-12, 1e-13});
  const DType bf = DType::BFloat16;
  Tensor qb = q.to(bf), kb = k.to(bf), vb = v.to(bf);
  // The composite rounds its scores and weights to bfloat16, the fused op does not.
  expect([=] { return kiln::matmul(kiln::softmax(scores(qb, kb) * 0.25, -1), vb); }, true, "",
         Tol{3e-2, 3e-2});
}

TEST_F(JitAttention, LeavesUnsafePatternsAlone) {
  Tensor q = random_tensor({2, 2, 24, 16}), k = random_tensor({2, 2, 24, 16});
  Tensor v = random_tensor({2, 2, 24, 16});
  // The softmax held by the user (the attention weights returned too).
  auto held = std::make_shared<Tensor>();
  expect(
      [=] {
        *held = kiln::softmax(scores(q, k) * 0.25, -1);
        return kiln::matmul(*held, v);
      },
      false);
  // The softmax read by another op.
  expect(
      [=] {
        const Tensor att = kiln::softmax(scores(q, k) * 0.25, -1);
        return kiln::matmul(att, v) + kiln::sum(att, {3}, true);
      },
      false);
  // The scores read by another op.
  expect(
      [=] {
        const Tensor s = scores(q, k);
        return kiln::matmul(kiln::softmax(s * 0.25, -1), v) * kiln::amax(s, {3}, true);
      },
      false);
  // Softmax over the queries, not the keys.
  expect([=] { return kiln::matmul(kiln::softmax(scores(q, k) * 0.25, -2), v); }, false);
  // A scale that is a tensor.
  Tensor scale = random_tensor({1});
  expect([=] { return kiln::matmul(kiln::softmax(scores(q, k) * scale, -1), v); }, false);
  // The fill is an input tensor (its value unknown to the trace).
  Tensor mask = kiln::gt(cols_of(24), rows_of(24));
  Tensor fill = kiln::full({}, Scalar(-INFINITY));
  expect([=] { return kiln::matmul(kiln::softmax(kiln::where(mask, fill, scores(q, k)), -1), v); },
         false);
}

TEST_F(JitAttention, SwitchedOffByNameAndOffOnTheCpuByDefault) {
  Tensor q = random_tensor({2, 2, 24, 16}), k = random_tensor({2, 2, 24, 16});
  Tensor v = random_tensor({2, 2, 24, 16});
  auto f = [=] { return kiln::matmul(kiln::softmax(scores(q, k) * 0.25, -1), v); };
  expect(f, true);
  tr::config().jit_disable = {"attention"};
  expect(f, false);
  EXPECT_TRUE(
      has_note(tr::explain().traces[0], "passes switched off (KILN_JIT_DISABLE): attention"));
  EXPECT_EQ(tr::explain().traces[0].kernels, 3) << tr::explain().table();
  tr::config().jit_disable.clear();
  tr::config().cpu_attention = false;
  expect(f, false);
}

// ---------------------------------------------------------------- CUDA

class JitAttentionCuda : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    tr::config().jit = true;
    tr::set_enabled(false);
  }
};

TEST_F(JitAttentionCuda, WorkloadPatternsAreOneFusedStep) {
  const Device gpu = kiln::cuda_device();
  for (DType d : {DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(kiln::dtype_name(d));
    Tensor qh = random_tensor({2, 8, 128, 64}), kh = random_tensor({2, 8, 128, 64});
    Tensor vh = random_tensor({2, 8, 128, 64});
    Tensor q = qh.to(d).to(gpu), k = kh.to(d).to(gpu), v = vh.to(d).to(gpu);
    const Tol tol = d == DType::Float32 ? Tol{1e-4, 1e-5} : Tol{3e-2, 3e-2};
    const std::vector<std::pair<const char*, std::function<Tensor()>>> cases = {
        {"bench workload", [=] { return kiln::matmul(kiln::softmax(scores(q, k) / 8.0, -1), v); }},
        {"causal masked_fill",
         [=] {
           const Tensor att = scores(q, k) * 0.125;
           const Tensor future = kiln::gt(cols_of(128, 0, gpu), rows_of(128, gpu));
           return kiln::matmul(kiln::softmax(kiln::where(future, Scalar(-INFINITY), att), -1), v);
         }},
    };
    for (const auto& [name, f] : cases) {
      SCOPED_TRACE(name);
      tr::reset();
      tr::TraceReport report;
      const Tensor got = traced(f, &report, "nvrtc");
      EXPECT_TRUE(has_note(report, kFused)) << tr::explain().table();
      EXPECT_TRUE(all_close(got, read(eager(f)), tol)) << tr::explain().table();
      // And the CPU's eager result (float32 inputs rounded as the GPU's were).
      const Tensor qc = q.to(kiln::kCPU).to(DType::Float32),
                   kc = k.to(kiln::kCPU).to(DType::Float32);
      const Tensor vc = v.to(kiln::kCPU).to(DType::Float32);
      const bool causal = std::string(name) != "bench workload";
      const Tensor cpu =
          eager([&] { return kiln::attention_composite(qc, kc, vc, Tensor(), causal, 0.125); });
      EXPECT_TRUE(all_close(got.to(DType::Float32), read(cpu), tol));
    }
  }
}

// An additive mask: the CUDA kernels take none, so the pattern stays as it is.
TEST_F(JitAttentionCuda, MasksStayUnfused) {
  const Device gpu = kiln::cuda_device();
  Tensor q = random_tensor({2, 4, 64, 64}).to(gpu), k = random_tensor({2, 4, 64, 64}).to(gpu);
  Tensor v = random_tensor({2, 4, 64, 64}).to(gpu), mask = random_tensor({64, 64}).to(gpu);
  auto f = [=] { return kiln::matmul(kiln::softmax(scores(q, k) * 0.125 + mask, -1), v); };
  tr::TraceReport report;
  const Tensor got = traced(f, &report, "nvrtc");
  EXPECT_FALSE(has_note(report, kFused)) << tr::explain().table();
  EXPECT_TRUE(all_close(got, read(eager(f)), Tol{1e-4, 1e-5}));
}

}  // namespace
