// Symbolic bounds (tracer/symbolic_shapes.h): a KV cache written at a moving position
// and read up to it is one trace whose slice bounds are index symbols, replayed (and
// verified against eager) at every position, checked against a float64 host reference
// and eager kiln on fresh random inputs; a select past the end raises as in eager.
#include <cmath>

#include <gtest/gtest.h>

#include "tracer/user_site.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;

class SymbolicBoundsTest : public LlvmJitTest {
 protected:
  void SetUp() override {
    LlvmJitTest::SetUp();
    tr::config().symbolic_shapes = true;
    tr::config().verify = true;  // every replay checked against eager
  }
};

constexpr int64_t kBatch = 3, kWidth = 8, kSteps = 40;

struct KvWeights {
  Host wq, wk, wv, x0;
};

// One decoder step: the new key and value written at `pos` (computed first, as Python's
// `k[:, pos:pos + 1] = x @ wk` does), attention over the first pos + 1 entries of the
// caches, the output read on the host (the walk's end). A SiteScope per statement gives
// the ops sites, as Python's call sites would.
Host kv_step(Tensor& k, Tensor& v, Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& wv,
             int64_t pos) {
  {
    tr::SiteScope statement;
    const Tensor key = kiln::matmul(x, wk);
    k.slice(1, pos, pos + 1).copy_(key);
  }
  {
    tr::SiteScope statement;
    const Tensor value = kiln::matmul(x, wv);
    v.slice(1, pos, pos + 1).copy_(value);
  }
  tr::SiteScope statement;
  const Tensor keys = k.slice(1, 0, pos + 1), values = v.slice(1, 0, pos + 1);
  const Tensor scores = kiln::matmul(kiln::matmul(x, wq), keys.transpose(1, 2));
  x = kiln::tanh(
      kiln::matmul(kiln::softmax(scores * (1.0 / std::sqrt(double(kWidth))), -1), values));
  return read(x);
}

std::vector<Host> kv_loop(const KvWeights& w) {
  const Tensor wq = make(w.wq, DType::Float32), wk = make(w.wk, DType::Float32),
               wv = make(w.wv, DType::Float32);
  Tensor k = kiln::zeros({kBatch, kSteps, kWidth}), v = kiln::zeros({kBatch, kSteps, kWidth});
  Tensor x = make(w.x0, DType::Float32);
  std::vector<Host> outs;
  for (int64_t pos = 0; pos < kSteps; ++pos) outs.push_back(kv_step(k, v, x, wq, wk, wv, pos));
  return outs;
}

// [B, 1, C] @ [C, C] in double.
Host row_times(const Host& x, const Host& w) {
  Host out({kBatch, 1, kWidth});
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t j = 0; j < kWidth; ++j) {
      double s = 0;
      for (int64_t i = 0; i < kWidth; ++i) s += x.at({b, 0, i}) * w.at({i, j});
      out.at({b, 0, j}) = s;
    }
  return out;
}

std::vector<Host> kv_reference(const KvWeights& w) {
  Host x = w.x0;
  std::vector<Host> keys, values, outs;
  for (int64_t pos = 0; pos < kSteps; ++pos) {
    keys.push_back(row_times(x, w.wk));
    values.push_back(row_times(x, w.wv));
    const Host q = row_times(x, w.wq);
    Host next({kBatch, 1, kWidth});
    for (int64_t b = 0; b < kBatch; ++b) {
      std::vector<double> score(static_cast<size_t>(pos + 1));
      double top = -INFINITY, sum = 0;
      for (int64_t s = 0; s <= pos; ++s) {
        double dot = 0;
        for (int64_t i = 0; i < kWidth; ++i) dot += q.at({b, 0, i}) * keys[s].at({b, 0, i});
        score[s] = dot / std::sqrt(double(kWidth));
        top = std::max(top, score[s]);
      }
      for (double& s : score) sum += (s = std::exp(s - top));
      for (int64_t j = 0; j < kWidth; ++j) {
        double acc = 0;
        for (int64_t s = 0; s <= pos; ++s) acc += score[s] / sum * values[s].at({b, 0, j});
        next.at({b, 0, j}) = std::tanh(acc);
      }
    }
    x = next;
    outs.push_back(x);
  }
  return outs;
}

TEST_F(SymbolicBoundsTest, AKvCacheWrittenAtAMovingPositionReplaysOneTrace) {
  const Range small{-0.5, 0.5};
  const KvWeights w{random_host({kWidth, kWidth}, DType::Float32, small),
                    random_host({kWidth, kWidth}, DType::Float32, small),
                    random_host({kWidth, kWidth}, DType::Float32, small),
                    random_host({kBatch, 1, kWidth}, DType::Float32)};
  const std::vector<Host> traced = kv_loop(w);
  const auto report = tr::explain();
  EXPECT_LE(report.recompiles.size(), 2u) << report.table();
  int64_t replays = 0;
  std::string why;
  for (const auto& t : report.traces) {
    replays += t.replays;
    why += t.symbolic;
  }
  EXPECT_GE(replays, kSteps - 6) << report.table();
  EXPECT_NE(why.find("i0 = start of op 1 (slice dim 1)"), std::string::npos) << report.table();
  const std::vector<Host> eager_outs = eager([&] { return kv_loop(w); });
  const std::vector<Host> reference = kv_reference(w);
  for (int64_t i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_TRUE(all_close(traced[i], eager_outs[i], Tol{1e-5, 1e-6}));
    EXPECT_TRUE(all_close(traced[i], reference[i], Tol{1e-4, 1e-5}));
  }
}

// A select at a moving index, compiled with the index symbolic: an index past the end
// raises eager's IndexError (the shape rule runs before the tracer sees the call), and
// the loop goes on replaying with right values.
TEST_F(SymbolicBoundsTest, AnIndexOutOfRangeRaisesAsInEagerAndTheLoopGoesOn) {
  const Host h = random_host({3, 12}, DType::Float32);
  const Tensor x = make(h, DType::Float32);
  for (int64_t s : {0, 1, 2, 3, 4, 5, 12, 6, -13, 7, 8}) {
    SCOPED_TRACE("index " + std::to_string(s));
    if (s >= 12 || s < -12) {
      EXPECT_TRUE(throws<kiln::IndexError>([&] { (void)read((x * 2.0).select(1, s) + 1.0); },
                                           {"[select] index", "out of range"}));
      continue;
    }
    const Host out = read((x * 2.0).select(1, s) + 1.0);
    Host want({3});
    for (int64_t r = 0; r < 3; ++r) want.v[r] = h.at({r, s}) * 2.0 + 1.0;
    EXPECT_TRUE(all_close(out, want, tol_pointwise(DType::Float32)));
  }
  const auto report = tr::explain();
  int64_t replays = 0;
  std::string why;
  for (const auto& t : report.traces) {
    replays += t.replays;
    why += t.symbolic;
  }
  EXPECT_GE(replays, 4) << report.table();
  EXPECT_NE(why.find("i0 = index of op 1 (select dim 1)"), std::string::npos) << report.table();
  EXPECT_LE(report.recompiles.size(), 2u) << report.table();
}

}  // namespace
}  // namespace kt
