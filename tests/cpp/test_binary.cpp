// Pointwise binary ops: tensor-tensor with broadcasting and strided inputs, tensor-scalar
// with the scalar on either side, comparisons giving bool, integer pow, and in-place
// add_/sub_/mul_/div_ into views, for every dtype each op accepts.
#include "reference.h"

namespace kt {
namespace {

using kiln::Scalar;

enum class Kind { Arith, Div, Cmp };

struct BinaryOp {
  const char* name;
  Tensor (*tt)(const Tensor&, const Tensor&);
  Tensor (*ts)(const Tensor&, const Scalar&);
  Tensor (*st)(const Scalar&, const Tensor&);
  double (*ref)(double, double);
  Kind kind;
};

double ref_ipow(double base, double e) {  // integer power, exponent >= 0
  double r = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(e); ++i) r *= base;
  return r;
}

#define KT_BINARY(fn, kind, ...)                                                   \
  BinaryOp {                                                                       \
#fn, [](const Tensor& a, const Tensor& b) { return kiln::fn(a, b); },            \
        [](const Tensor& a, const Scalar& b) { return kiln::fn(a, b); },             \
        [](const Scalar& a, const Tensor& b) { return kiln::fn(a, b); },             \
        [](double x, double y) -> double { return __VA_ARGS__; }, kind \
  }

const std::vector<BinaryOp>& binary_ops() {
  static const std::vector<BinaryOp> ops = {
      KT_BINARY(add, Kind::Arith, x + y),
      KT_BINARY(sub, Kind::Arith, x - y),
      KT_BINARY(mul, Kind::Arith, x * y),
      KT_BINARY(div, Kind::Div, x / y),
      KT_BINARY(pow, Kind::Arith, std::pow(x, y)),
      KT_BINARY(maximum, Kind::Arith, std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y)),
      KT_BINARY(minimum, Kind::Arith, std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y)),
      KT_BINARY(eq, Kind::Cmp, x == y),
      KT_BINARY(ne, Kind::Cmp, x != y),
      KT_BINARY(lt, Kind::Cmp, x < y),
      KT_BINARY(le, Kind::Cmp, x <= y),
      KT_BINARY(gt, Kind::Cmp, x > y),
      KT_BINARY(ge, Kind::Cmp, x >= y),
  };
  return ops;
}
#undef KT_BINARY

struct BinaryCase {
  int op;
  DType dtype;
};

std::vector<BinaryCase> binary_cases() {
  std::vector<BinaryCase> cases;
  for (int i = 0; i < static_cast<int>(binary_ops().size()); ++i) {
    for (DType d : all_dtypes()) {
      if (d == DType::Bool && binary_ops()[static_cast<size_t>(i)].kind != Kind::Cmp) continue;
      cases.push_back({i, d});
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<BinaryCase>& info) {
  return std::string(binary_ops()[static_cast<size_t>(info.param.op)].name) + "_" +
         name(info.param.dtype);
}

Scalar scalar_of(DType d, double v) {
  if (d == DType::Bool) return Scalar(v != 0.0);
  if (is_int(d)) return Scalar(static_cast<int64_t>(v));
  return Scalar(v);
}

class Binary : public ::testing::TestWithParam<BinaryCase> {
 protected:
  const BinaryOp& op() const { return binary_ops()[static_cast<size_t>(GetParam().op)]; }
  DType d() const { return GetParam().dtype; }
  bool is_pow() const { return std::string(op().name) == "pow"; }
  DType out() const {
    if (op().kind == Kind::Cmp) return DType::Bool;
    if (op().kind == Kind::Div && !is_float(d())) return DType::Float32;
    return d();
  }
  Tol tol() const {
    if (op().kind == Kind::Cmp) return tol_exact();
    return tol_pointwise(out());
  }
  // Values for the left and right operand, chosen so that each op is well defined.
  Range left_range() const {
    if (is_pow()) return {0.5, 2.0, -5, 5};
    return {-2.0, 2.0, -9, 9};
  }
  Range right_range() const {
    if (is_pow()) return {-2.0, 2.0, 0, 6};
    if (op().kind == Kind::Div) return {-2.0, 2.0, -9, 9, true, 0.25};
    return {-2.0, 2.0, -9, 9};
  }
  // Comparisons draw from a few values so that ties happen under any broadcasting.
  Host operand(const Dims& sizes, const Range& r) const {
    if (op().kind != Kind::Cmp || !is_float(d())) return random_host(sizes, d(), r);
    static const double pool[] = {-1.5, -0.5, 0.0, 0.25, 1.0, 2.0};
    Host h(sizes);
    for (auto& v : h.v) v = pool[uniform_int(0, 5)];
    return h;
  }
  Host left(const Dims& s) const {
    Range r = left_range();
    if (op().kind == Kind::Cmp) r.ilo = -3, r.ihi = 3;
    return operand(s, r);
  }
  Host right(const Dims& s) const {
    Range r = right_range();
    if (op().kind == Kind::Cmp) r.ilo = -3, r.ihi = 3;
    return operand(s, r);
  }
  double ref(double x, double y) const {
    if (is_pow() && is_int(d())) return ref_ipow(x, y);
    return op().ref(x, y);
  }
};

TEST_P(Binary, BroadcastsShapesAndLayouts) {
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{3, 4, 5}, {3, 4, 5}}, {{3, 1, 5}, {4, 5}},  {{1}, {7}},
      {{2, 3}, {}},           {{}, {2, 3}},         {{}, {}},
      {{5, 1}, {1, 6}},       {{0, 3}, {1, 3}},     {{2, 1, 4}, {2, 3, 1}},
      {{6}, {4, 1}},          {{1, 1}, {1, 1}},     {{2, 0}, {2, 1}},
      {{257, 129}, {129}},    {{130, 1}, {130, 67}}};
  const std::pair<Layout, Layout> layouts[] = {{Layout::Contiguous, Layout::Contiguous},
                                               {Layout::Transposed, Layout::Stepped},
                                               {Layout::Offset, Layout::Permuted}};
  for (const auto& [sa, sb] : shapes) {
    const Host a = left(sa), b = right(sb);
    const Host expected = map2(a, b, [&](double x, double y) { return ref(x, y); });
    for (const auto& [la, lb] : layouts) {
      SCOPED_TRACE(dims_string(sa) + " " + name(la) + " with " + dims_string(sb) + " " + name(lb));
      const Tensor ta = make(a, d(), la), tb = make(b, d(), lb);
      const Tensor y = op().tt(ta, tb);
      ASSERT_TRUE(has_meta(y, expected.sizes, out()));
      EXPECT_TRUE(all_close(y, expected, tol()));
      EXPECT_TRUE(all_close(ta, a, tol_exact())) << "an input changed";
      EXPECT_TRUE(all_close(tb, b, tol_exact())) << "an input changed";
    }
  }
}

TEST_P(Binary, ExpandedOperands) {
  const Host a = left({1, 6}), b = right({5, 1});
  const Tensor ta = make(a, d()).expand({5, 6});
  const Tensor tb = make(b, d()).expand({5, 6});
  const Host expected = map2(a, b, [&](double x, double y) { return ref(x, y); });
  const Tensor y = op().tt(ta, tb);
  ASSERT_TRUE(has_meta(y, {5, 6}, out()));
  EXPECT_TRUE(all_close(y, expected, tol()));
}

TEST_P(Binary, ScalarOnEitherSide) {
  const Host s_right = right({});
  const Host s_left = left({});
  for (const Dims& sizes : {Dims{}, Dims{0}, Dims{9}, Dims{3, 7}, Dims{1000}}) {
    SCOPED_TRACE(dims_string(sizes));
    const Host a = left(sizes), b = right(sizes);
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      const double sr = s_right.v[0], sl = s_left.v[0];
      const Tensor ya = op().ts(make(a, d(), layout), scalar_of(d(), sr));
      ASSERT_TRUE(has_meta(ya, sizes, out()));
      EXPECT_TRUE(all_close(ya, map(a, [&](double x) { return ref(x, sr); }), tol()))
          << "tensor op scalar " << sr;
      const Tensor yb = op().st(scalar_of(d(), sl), make(b, d(), layout));
      ASSERT_TRUE(has_meta(yb, sizes, out()));
      EXPECT_TRUE(all_close(yb, map(b, [&](double y) { return ref(sl, y); }), tol()))
          << "scalar " << sl << " op tensor";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpsAndDTypes, Binary, ::testing::ValuesIn(binary_cases()), case_name);

// ---- specific semantics

TEST(BinaryMisc, IntegerPowStaysIntegralAndExact) {
  for (DType d : {DType::Int32, DType::Int64}) {
    SCOPED_TRACE(name(d));
    const Host base = random_host({50}, d, {0, 0, -7, 7});
    const Host e = random_host({50}, d, {0, 0, 0, 9});
    const Tensor y = kiln::pow(make(base, d), make(e, d));
    ASSERT_TRUE(has_meta(y, {50}, d));
    EXPECT_TRUE(all_close(y, map2(base, e, ref_ipow), tol_exact()));
    // Scalar exponent and scalar base.
    EXPECT_TRUE(all_close(kiln::pow(make(base, d), 3),
                          map(base, [](double x) { return x * x * x; }), tol_exact()));
    EXPECT_TRUE(all_close(kiln::pow(2, make(e, d)),
                          map(e, [](double x) { return std::ldexp(1.0, static_cast<int>(x)); }),
                          tol_exact()));
  }
  // int64 powers beyond 2^53 stay exact.
  const Tensor big = kiln::pow(kiln::from_vector<int64_t>({3, -3}, {2}), int64_t{39});
  const std::vector<int64_t> v = big.to_vector<int64_t>();
  int64_t p = 1;
  for (int i = 0; i < 39; ++i) p *= 3;
  EXPECT_EQ(v[0], p);
  EXPECT_EQ(v[1], -p);
}

TEST(BinaryMisc, FloatPowWithScalarExponents) {
  const Host h = random_host({64}, DType::Float32, {0.1, 3.0});
  const Tensor x = make(h, DType::Float32);
  for (double e : {0.5, 2.0, -1.0, 3.0, 0.0, -2.5}) {
    SCOPED_TRACE(e);
    EXPECT_TRUE(all_close(kiln::pow(x, e), map(h, [&](double v) { return std::pow(v, e); }),
                          tol_pointwise(DType::Float32)));
  }
}

TEST(BinaryMisc, IntegerDivisionIsTrueDivision) {
  for (DType d : {DType::Int32, DType::Int64}) {
    const Host a = random_host({40}, d, {0, 0, -100, 100});
    const Host b = random_host({40}, d, {0, 0, -9, 9, true});
    const Tensor q = kiln::div(make(a, d), make(b, d));
    ASSERT_TRUE(has_meta(q, {40}, DType::Float32));
    EXPECT_TRUE(all_close(q, map2(a, b, [](double x, double y) { return x / y; }),
                          tol_pointwise(DType::Float32)));
  }
}

TEST(BinaryMisc, ComparisonsPromoteBeforeComparing) {
  // int32 tensor against a float scalar compares in float: 2 < 2.5.
  const Host h({5}, {1, 2, 3, -2, 0});
  const Tensor x = make(h, DType::Int32);
  EXPECT_TRUE(all_close(kiln::lt(x, 2.5), map(h, [](double v) { return v < 2.5 ? 1.0 : 0.0; }),
                        tol_exact()));
  EXPECT_TRUE(all_close(kiln::ge(2.5, x), map(h, [](double v) { return 2.5 >= v ? 1.0 : 0.0; }),
                        tol_exact()));
  // int32 against float64 tensors.
  const Host f({5}, {1.0, 2.5, 3.0, -2.0, 1e-9});
  const Tensor eq = kiln::eq(x, make(f, DType::Float64));
  ASSERT_TRUE(has_meta(eq, {5}, DType::Bool));
  EXPECT_TRUE(all_close(eq, map2(h, f, [](double a, double b) { return a == b ? 1.0 : 0.0; }),
                        tol_exact()));
}

TEST(BinaryMisc, MaximumAndMinimumPropagateNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Host a({4}, {nan, 1.0, nan, -1.0});
  const Host b({4}, {2.0, nan, nan, 3.0});
  for (DType d : {DType::Float32, DType::Float64, DType::Float16}) {
    EXPECT_TRUE(all_close(kiln::maximum(make(a, d), make(b, d)), Host({4}, {nan, nan, nan, 3.0}),
                          tol_exact()));
    EXPECT_TRUE(all_close(kiln::minimum(make(a, d), make(b, d)), Host({4}, {nan, nan, nan, -1.0}),
                          tol_exact()));
  }
}

TEST(BinaryMisc, OperatorsMapToTheirOps) {
  const Host a = random_host({3, 4}, DType::Float32, {0.5, 2.0});
  const Host b = random_host({3, 4}, DType::Float32, {0.5, 2.0});
  const Tensor ta = make(a, DType::Float32), tb = make(b, DType::Float32);
  const Tol t = tol_pointwise(DType::Float32);
  auto r = [&](double (*f)(double, double)) { return map2(a, b, f); };
  EXPECT_TRUE(all_close(ta + tb, r([](double x, double y) { return x + y; }), t));
  EXPECT_TRUE(all_close(ta - tb, r([](double x, double y) { return x - y; }), t));
  EXPECT_TRUE(all_close(ta * tb, r([](double x, double y) { return x * y; }), t));
  EXPECT_TRUE(all_close(ta / tb, r([](double x, double y) { return x / y; }), t));
  EXPECT_TRUE(all_close(ta == ta, map(a, [](double) { return 1.0; }), tol_exact()));
  EXPECT_TRUE(
      all_close(ta != tb, r([](double x, double y) { return x != y ? 1.0 : 0.0; }), tol_exact()));
  EXPECT_TRUE(
      all_close(ta < tb, r([](double x, double y) { return x < y ? 1.0 : 0.0; }), tol_exact()));
  EXPECT_TRUE(
      all_close(ta <= tb, r([](double x, double y) { return x <= y ? 1.0 : 0.0; }), tol_exact()));
  EXPECT_TRUE(
      all_close(ta > tb, r([](double x, double y) { return x > y ? 1.0 : 0.0; }), tol_exact()));
  EXPECT_TRUE(
      all_close(ta >= tb, r([](double x, double y) { return x >= y ? 1.0 : 0.0; }), tol_exact()));
  EXPECT_TRUE(all_close(2.0 - ta, map(a, [](double x) { return 2.0 - x; }), t));
  EXPECT_TRUE(all_close(ta / 4.0, map(a, [](double x) { return x / 4.0; }), t));
  EXPECT_TRUE(all_close(3 * ta, map(a, [](double x) { return 3.0 * x; }), t));
  EXPECT_TRUE(all_close(1.0 / ta, map(a, [](double x) { return 1.0 / x; }), t));
}

// ---- in place into views

class BinaryInPlace : public ::testing::TestWithParam<DType> {};

TEST_P(BinaryInPlace, IntoStridedViewsWithTensorAndScalarOperands) {
  const DType d = GetParam();
  const Tol tol = tol_pointwise(d);
  const Host h = random_host({4, 6}, d);
  Tensor base = make(h, d);
  Host expected = h;

  // Columns 1, 3, 5 (a [4, 3] view with stride 2) += a broadcast row.
  const Host row = random_host({3}, d);
  Tensor cols = base.slice(1, 1, 6, 2);
  Tensor& r = cols.add_(make(row, d));
  EXPECT_TRUE(r.same(cols));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      expected.at({i, 2 * j + 1}) = round_to(d, h.at({i, 2 * j + 1}) + row.at({j}));
  ASSERT_TRUE(all_close(base, expected, tol));

  // Through a transposed view, times a scalar.
  const double s = is_int(d) ? 3.0 : 1.5;
  base.t().mul_(scalar_of(d, s));
  for (auto& v : expected.v) v = round_to(d, v * s);
  ASSERT_TRUE(all_close(base, expected, tol));

  // Row 2 -= a non-contiguous operand.
  const Host other = random_host({6, 1}, d);
  base.select(0, 2).sub_(make(other, d, Layout::Stepped).squeeze(1));
  for (int64_t j = 0; j < 6; ++j)
    expected.at({2, j}) = round_to(d, expected.at({2, j}) - other.at({j, 0}));
  ASSERT_TRUE(all_close(base, expected, tol));

  // += a 0-dim tensor, then -= a scalar on a narrowed block.
  const Host zero_dim = random_host({}, d);
  base.narrow(0, 1, 2).add_(make(zero_dim, d)).sub_(scalar_of(d, 2.0));
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 0; j < 6; ++j)
      expected.at({i, j}) = round_to(d, round_to(d, expected.at({i, j}) + zero_dim.v[0]) - 2.0);
  ASSERT_TRUE(all_close(base, expected, tol));

  // Aliasing: x += x.
  Tensor c = base.clone();
  c.add_(c);
  EXPECT_TRUE(all_close(c, map(expected, [&](double v) { return round_to(d, 2 * v); }), tol));

  if (is_float(d)) {
    // div_ into the view, by a tensor and by a scalar.
    const Host divisor = random_host({4, 3}, d, {-2, 2, -9, 9, true, 0.5});
    base.slice(1, 0, 6, 2).div_(make(divisor, d)).div_(scalar_of(d, 4.0));
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 3; ++j)
        expected.at({i, 2 * j}) =
            round_to(d, round_to(d, expected.at({i, 2 * j}) / divisor.at({i, j})) / 4.0);
    EXPECT_TRUE(all_close(base, expected, tol));
  }
}

INSTANTIATE_TEST_SUITE_P(NumericDTypes, BinaryInPlace, ::testing::ValuesIn(numeric_dtypes()),
                         param_name);

TEST(BinaryInPlaceMisc, MixedDTypeOperandsConvertIntoTheOutput) {
  // float32 += int32 (the result type float32 fits the output).
  const Host a = random_host({5}, DType::Float32), b = random_host({5}, DType::Int32);
  Tensor x = make(a, DType::Float32);
  x.add_(make(b, DType::Int32));
  EXPECT_TRUE(all_close(x, map2(a, b, [](double u, double v) { return u + v; }),
                        tol_pointwise(DType::Float32)));
  // float16 *= float32: computed in float32, rounded into float16.
  const Host c = random_host({5}, DType::Float16), e = random_host({5}, DType::Float32);
  Tensor y = make(c, DType::Float16);
  y.mul_(make(e, DType::Float32));
  EXPECT_TRUE(all_close(y, map2(c, e, [](double u, double v) { return u * v; }),
                        tol_pointwise(DType::Float16)));
  EXPECT_EQ(y.dtype(), DType::Float16);
}

}  // namespace
}  // namespace kt
