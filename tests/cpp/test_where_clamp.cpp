// where(cond, a, b) with broadcasting of all three, strided inputs, scalars on either
// branch and dtype promotion; clamp with min, max or both for every numeric dtype,
// NaN propagation, min > max, and clamp_ into a view.
#include <optional>

#include "reference.h"

namespace kt {
namespace {

using kiln::Scalar;

Scalar scalar_of(DType d, double v) {
  if (d == DType::Bool) return Scalar(v != 0.0);
  if (is_int(d)) return Scalar(static_cast<int64_t>(v));
  return Scalar(v);
}

Host ref_where(const Host& c, const Host& a, const Host& b) {
  Host out(broadcast(broadcast(c.sizes, a.sizes), b.sizes));
  int64_t k = 0;
  for_each_index(out.sizes, [&](const Dims& i) {
    out.v[static_cast<size_t>(k++)] = c.bat(i) != 0.0 ? a.bat(i) : b.bat(i);
  });
  return out;
}

class Where : public ::testing::TestWithParam<DType> {};

TEST_P(Where, BroadcastsAllThreeInputs) {
  const DType d = GetParam();
  struct Shapes {
    Dims c, a, b;
  };
  const Shapes cases[] = {
      {{3, 4}, {3, 4}, {3, 4}}, {{3, 1}, {1, 4}, {}},           {{4}, {2, 3, 4}, {3, 1}},
      {{}, {2, 2}, {2, 2}},     {{2, 0, 3}, {1, 3}, {2, 1, 1}}, {{200, 33}, {33}, {200, 1}},
      {{1}, {1}, {1}}};
  for (const Shapes& s : cases) {
    const Host c = random_host(s.c, DType::Bool);
    const Host a = random_host(s.a, d), b = random_host(s.b, d);
    const Host expected = ref_where(c, a, b);
    for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Stepped}) {
      SCOPED_TRACE(dims_string(s.c) + " " + dims_string(s.a) + " " + dims_string(s.b) + " " +
                   name(layout));
      const Tensor y =
          kiln::where(make(c, DType::Bool, layout), make(a, d, layout), make(b, d, Layout::Offset));
      ASSERT_TRUE(has_meta(y, expected.sizes, d));
      EXPECT_TRUE(all_close(y, expected, tol_exact()));
    }
  }
}

TEST_P(Where, ScalarBranches) {
  const DType d = GetParam();
  const Host c = random_host({5, 6}, DType::Bool);
  const Host a = random_host({5, 6}, d);
  const double s = random_host({}, d).v[0];
  const Tensor tc = make(c, DType::Bool), ta = make(a, d, Layout::Transposed);
  const Tensor y1 = kiln::where(tc, ta, scalar_of(d, s));
  ASSERT_TRUE(has_meta(y1, {5, 6}, d));
  EXPECT_TRUE(all_close(y1, ref_where(c, a, Host({}, {s})), tol_exact()));
  const Tensor y2 = kiln::where(tc, scalar_of(d, s), ta);
  ASSERT_TRUE(has_meta(y2, {5, 6}, d));
  EXPECT_TRUE(all_close(y2, ref_where(c, Host({}, {s}), a), tol_exact()));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Where, ::testing::ValuesIn(all_dtypes()), param_name);

TEST(WhereMisc, PromotesItsBranches) {
  const Host c = random_host({8}, DType::Bool);
  const Host a = random_host({8}, DType::Int32), b = random_host({8}, DType::Float32);
  const Tensor y =
      kiln::where(make(c, DType::Bool), make(a, DType::Int32), make(b, DType::Float32));
  ASSERT_TRUE(has_meta(y, {8}, DType::Float32));
  EXPECT_TRUE(all_close(y, ref_where(c, a, b), tol_exact()));
  // A float scalar with an integer tensor gives the default float dtype.
  const Tensor z = kiln::where(make(c, DType::Bool), make(a, DType::Int32), 0.5);
  ASSERT_TRUE(has_meta(z, {8}, DType::Float32));
  EXPECT_TRUE(all_close(z, ref_where(c, a, Host({}, {0.5})), tol_exact()));
  // An int scalar with a float16 tensor keeps float16.
  const Host f = random_host({8}, DType::Float16);
  const Tensor w = kiln::where(make(c, DType::Bool), 3, make(f, DType::Float16));
  ASSERT_TRUE(has_meta(w, {8}, DType::Float16));
  EXPECT_TRUE(all_close(w, ref_where(c, Host({}, {3.0}), f), tol_exact()));
}

// ---- clamp

double ref_clamp(double x, std::optional<double> lo, std::optional<double> hi) {
  if (std::isnan(x)) return x;
  if (lo) x = std::max(x, *lo);
  if (hi) x = std::min(x, *hi);  // min > max: everything becomes max (PyTorch)
  return x;
}

class Clamp : public ::testing::TestWithParam<DType> {};

TEST_P(Clamp, MinMaxOrBothOnAnyLayout) {
  const DType d = GetParam();
  const double lo = is_int(d) ? -4.0 : round_to(d, -0.75);
  const double hi = is_int(d) ? 5.0 : round_to(d, 1.25);
  struct Bounds {
    std::optional<double> lo, hi;
  };
  const Bounds bounds[] = {{lo, hi}, {lo, std::nullopt}, {std::nullopt, hi}};
  for (const Dims& sizes : {Dims{}, Dims{0, 4}, Dims{1}, Dims{6, 7}, Dims{3, 1, 130}}) {
    const Host h = random_host(sizes, d);
    for (const Bounds& b : bounds) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Stepped}) {
        SCOPED_TRACE(dims_string(sizes) + " " + name(layout) + " min " +
                     (b.lo ? std::to_string(*b.lo) : "none") + " max " +
                     (b.hi ? std::to_string(*b.hi) : "none"));
        const std::optional<Scalar> smin =
            b.lo ? std::optional<Scalar>(scalar_of(d, *b.lo)) : std::nullopt;
        const std::optional<Scalar> smax =
            b.hi ? std::optional<Scalar>(scalar_of(d, *b.hi)) : std::nullopt;
        const Tensor y = kiln::clamp(make(h, d, layout), smin, smax);
        ASSERT_TRUE(has_meta(y, sizes, d));
        EXPECT_TRUE(
            all_close(y, map(h, [&](double x) { return ref_clamp(x, b.lo, b.hi); }), tol_exact()));
      }
    }
  }
}

TEST_P(Clamp, MinAboveMaxGivesMax) {
  const DType d = GetParam();
  const Host h = random_host({20}, d);
  const Tensor y = kiln::clamp(make(h, d), scalar_of(d, 2), scalar_of(d, 1));
  EXPECT_TRUE(all_close(y, map(h, [](double) { return 1.0; }), tol_exact()));
}

TEST_P(Clamp, InPlaceIntoAView) {
  const DType d = GetParam();
  const Host h = random_host({4, 6}, d);
  Tensor base = make(h, d);
  Tensor view = base.slice(1, 0, 6, 3).t();  // columns 0 and 3, transposed
  Tensor& r = view.clamp_(scalar_of(d, -1), scalar_of(d, 1));
  EXPECT_TRUE(r.same(view));
  Host expected = h;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j : {0, 3}) expected.at({i, j}) = ref_clamp(h.at({i, j}), -1.0, 1.0);
  EXPECT_TRUE(all_close(base, expected, tol_exact()));
}

INSTANTIATE_TEST_SUITE_P(NumericDTypes, Clamp, ::testing::ValuesIn(numeric_dtypes()), param_name);

TEST(ClampMisc, NaNPassesThrough) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Host h({5}, {nan, -inf, inf, 0.5, -3.0});
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(name(d));
    const Tensor y = kiln::clamp(make(h, d), -1.0, 1.0);
    EXPECT_TRUE(all_close(y, Host({5}, {nan, -1.0, 1.0, 0.5, -1.0}), tol_exact()));
  }
}

}  // namespace
}  // namespace kt
