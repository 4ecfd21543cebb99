// rand / randn inside fused kernels (KOp::Random): a traced dropout is one kernel, and
// every replay draws exactly what eager draws from the same generator state (the fused
// code calls ops/philox.h as the eager kernels do). Covered: the dropout chain with its
// scalar 0 (one kernel), randn beside it, every floating dtype, a smaller rand broadcast
// into the group, dropout after a row op (softmax) in the same kernel, strided inputs,
// rand buffers (jit/llvm/codegen.cpp: four elements per draw, chunk by chunk) over long
// rows split between threads mid-row and read by several passes of a row kernel.
#include <gtest/gtest.h>

#include "ops/api.h"
#include "reference.h"
#include "tracer/tracer.h"
#include "tracer_util.h"

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

class JitRandom : public LlvmJitTest {};

// Calls f traced (in a region) `calls` times, each after manual_seed(100 + call), and
// checks each result against f run eagerly after the same seed. Returns the kernel count
// of the one trace.
template <class F>
int expect_replays_draw_as_eager(F&& f, Tol tol, int calls = 6) {
  for (int c = 0; c < calls; ++c) {
    SCOPED_TRACE("call " + std::to_string(c));
    kiln::manual_seed(100 + static_cast<uint64_t>(c));
    Tensor traced;
    {
      tr::Region region;
      traced = f();
    }
    kiln::manual_seed(100 + static_cast<uint64_t>(c));
    const Tensor reference = eager(f);
    EXPECT_EQ(traced.dtype(), reference.dtype());
    EXPECT_TRUE(all_close(traced, read(reference), tol));
  }
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(r.traces.size(), 1u) << r.table();
  if (r.traces.empty()) return -1;
  EXPECT_EQ(r.traces[0].backend, "llvm") << r.table();
  EXPECT_GE(r.traces[0].replays, 3) << r.table();
  return r.traces[0].kernels;
}

Tensor dropout(const Tensor& x, double p) {
  const Tensor keep = kiln::ge(kiln::rand(x.sizes(), kiln::TensorOptions(x.dtype())), p);
  return kiln::where(keep, x * (1.0 / (1.0 - p)), 0.0);
}

}  // namespace

TEST_F(JitRandom, DropoutIsOneKernelAndDrawsAsEager) {
  const Tensor x = random_tensor({64, 257});
  auto f = [&] { return dropout(kiln::tanh(x) * 2.0, 0.3) + 1.0; };
  EXPECT_EQ(expect_replays_draw_as_eager(f, tol_pointwise(DType::Float32)), 1)
      << tr::explain().table();
}

TEST_F(JitRandom, RandnBesideDropoutAndTheSameDrawsTwice) {
  const Tensor x = random_tensor({33, 100});
  // Two rand calls of one shape draw different numbers (CSE must not merge them).
  auto f = [&] {
    return dropout(x, 0.5) + kiln::randn({33, 100}) * 0.1 + kiln::rand({33, 100}) -
           kiln::rand({33, 100});
  };
  EXPECT_EQ(expect_replays_draw_as_eager(f, Tol{2e-6, 2e-6}), 1) << tr::explain().table();
  kiln::manual_seed(7);
  const Tensor a = eager([] { return kiln::rand({4096}); });
  const Tensor b = eager([] { return kiln::rand({4096}); });
  EXPECT_FALSE(all_close(a, read(b), Tol{0, 0}));
}

TEST_F(JitRandom, EveryFloatingDtypeDrawsExactly) {
  for (DType d : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(d));
    tr::reset();
    const Tensor x = random_tensor({17, 45}, d);
    auto f = [&] { return kiln::rand({17, 45}, kiln::TensorOptions(d)) * x; };
    // rand is exact in every dtype; the product rounds once, as eager's does.
    EXPECT_EQ(expect_replays_draw_as_eager(f, tol_exact(), 5), 1) << tr::explain().table();
  }
}

TEST_F(JitRandom, SmallerRandBroadcastIntoTheGroup) {
  const Tensor x = random_tensor({48, 130});
  auto f = [&] { return kiln::exp(x) * kiln::rand({130}) + kiln::rand({48, 1}); };
  expect_replays_draw_as_eager(f, tol_pointwise(DType::Float32));
}

TEST_F(JitRandom, DropoutAfterSoftmaxAndOnAStridedInput) {
  const Tensor x = random_tensor({40, 96});
  auto f = [&] { return dropout(kiln::softmax(x * 0.5, -1), 0.2); };
  EXPECT_EQ(expect_replays_draw_as_eager(f, Tol{2e-6, 2e-6}), 1) << tr::explain().table();
  tr::reset();
  const Tensor xt = make(random_host({96, 40}, DType::Float32), DType::Float32, Layout::Transposed);
  auto g = [&] { return dropout(xt, 0.4) * 3.0; };
  EXPECT_EQ(expect_replays_draw_as_eager(g, tol_pointwise(DType::Float32)), 1)
      << tr::explain().table();
}

// Rows longer than a rand buffer's chunk (256), of a length that is no multiple of 4 (a
// row's first element mid-draw), in work split between threads mid-row, and float16.
TEST_F(JitRandom, LongRowsDrawAsEager) {
  const Tensor x = random_tensor({3, 70001});
  auto f = [&] { return dropout(x, 0.25) - 0.5; };
  EXPECT_EQ(expect_replays_draw_as_eager(f, tol_pointwise(DType::Float32)), 1)
      << tr::explain().table();
  tr::reset();
  const Tensor h = random_tensor({7, 1031}, DType::Float16);
  auto g = [&] { return kiln::rand({7, 1031}, kiln::TensorOptions(DType::Float16)) * h; };
  EXPECT_EQ(expect_replays_draw_as_eager(g, tol_exact(), 5), 1) << tr::explain().table();
}

// A rand read by every pass of a row kernel (layer_norm's mean and variance, then the
// stores): rows shorter than a chunk draw once for all passes, longer ones per chunk.
TEST_F(JitRandom, RowKernelPassesReadOneDraw) {
  for (int64_t cols : {int64_t{130}, int64_t{1001}}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    tr::reset();
    const Tensor x = random_tensor({37, cols});
    auto f = [&] {
      const Tensor y = dropout(x, 0.1) + x;
      return kiln::layer_norm(y, {cols}) + y;
    };
    EXPECT_EQ(expect_replays_draw_as_eager(f, Tol{2e-5, 2e-5}), 1) << tr::explain().table();
  }
}
