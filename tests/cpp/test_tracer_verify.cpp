// KILN_VERIFY's judge (tracer/verify.h): a compiled value that rounds differently from
// eager on an ill-conditioned result passes when it is as close to the float64 result as
// eager is, and a wrong value still raises. The program is built by hand so that the
// "compiled" values can be chosen: x * y - z with z = fl(x * y) (only rounding is left;
// an FMA computes it exactly, eager gets 0), and the same with a wrong value.
#include <cmath>
#include <random>

#include "tracer/verify.h"
#include "tracer_util.h"

namespace kt {
namespace {

namespace tr = kiln::tracer;

tr::TraceOp binary(kiln::OpId id, tr::InputRef a, tr::InputRef b, const Dims& sizes) {
  tr::TraceOp op;
  op.op = id;
  op.inputs = {a, b};
  op.meta.sizes = sizes;
  op.meta.strides = kiln::contiguous_strides(sizes);
  op.meta.dtype = DType::Float32;
  op.meta.device = kiln::kCPU;
  return op;
}

struct ResidualProgram {
  tr::CompiledTrace compiled;
  std::vector<Tensor> inputs;
  std::vector<float> fma;  // x * y - z computed exactly, rounded once (what an FMA gives)
};

ResidualProgram residual_program(int n) {
  using Ref = tr::InputRef;
  const Ref x{Ref::Kind::External, 0}, y{Ref::Kind::External, 1}, z{Ref::Kind::External, 2};
  ResidualProgram r;
  r.compiled.program.ops = {binary(kiln::OpId::Mul, x, y, {n}),
                            binary(kiln::OpId::Sub, {Ref::Kind::Value, 0}, z, {n})};
  r.compiled.program.num_externals = 3;
  r.compiled.program.live = {false, true};
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(1.0f, 2.0f);
  std::vector<float> xs(n), ys(n), zs(n);
  for (int i = 0; i < n; ++i) {
    xs[i] = dist(gen);
    ys[i] = dist(gen);
    zs[i] = xs[i] * ys[i];
    r.fma.push_back(static_cast<float>(double(xs[i]) * double(ys[i]) - double(zs[i])));
  }
  r.inputs = {kiln::from_vector(xs, {n}), kiln::from_vector(ys, {n}), kiln::from_vector(zs, {n})};
  return r;
}

TEST_F(TracerTest, VerifyAcceptsRoundingOfAnIllConditionedValue) {
  ResidualProgram r = residual_program(64);
  const tr::VerifyReference ref = tr::verify_reference(r.compiled, r.inputs, {});
  // Eager rounds x * y first: every residual is 0. The "compiled" one is exact.
  for (float e : read(ref.values[1]).v) ASSERT_EQ(e, 0.0f);
  std::vector<Tensor> values = {Tensor(), kiln::from_vector(r.fma, {64})};
  EXPECT_NO_THROW(tr::verify_replay(r.compiled, values, ref, {}, {}));
}

TEST_F(TracerTest, VerifyRejectsAWrongValue) {
  ResidualProgram r = residual_program(64);
  const tr::VerifyReference ref = tr::verify_reference(r.compiled, r.inputs, {});
  std::vector<float> wrong = r.fma;
  wrong[5] += 1e-3f;  // far above the residuals (about 1e-7)
  std::vector<Tensor> values = {Tensor(), kiln::from_vector(wrong, {64})};
  EXPECT_TRUE(throws<kiln::Error>([&] { tr::verify_replay(r.compiled, values, ref, {}, {}); },
                                  {"[verify]", "op 1 (sub)", "against float64"}));
}

}  // namespace
}  // namespace kt
