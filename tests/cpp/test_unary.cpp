// Pointwise unary ops for every dtype they accept, on contiguous and strided inputs,
// empty and size-1 dims and a large tensor (vector tails, threads), against std:: math
// in double. Float-result ops (exp, log, ...) turn integers and bool into float32.
#include <limits>

#include "reference.h"

namespace kt {
namespace {

struct UnaryOp {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double (*ref)(double);
  bool float_result;  // DTypeRule::Float: integer/bool inputs give float32
  bool exact;         // no rounding error in the result dtype
  Range range;        // input values (floats) / ilo..ihi (integers)
  bool allow_bool;
};

constexpr double kPi = 3.14159265358979323846;

double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x)));
}

const std::vector<UnaryOp>& unary_ops() {
  static const std::vector<UnaryOp> ops = {
      {"neg",
       [](const Tensor& x) { return kiln::neg(x); },
       [](double x) { return -x; },
       false,
       true,
       {-3, 3, -50, 50},
       false},
      {"abs",
       [](const Tensor& x) { return kiln::abs(x); },
       [](double x) { return std::fabs(x); },
       false,
       true,
       {-3, 3, -50, 50},
       false},
      {"relu",
       [](const Tensor& x) { return kiln::relu(x); },
       [](double x) { return x > 0 ? x : 0.0; },
       false,
       true,
       {-3, 3, -50, 50},
       false},
      {"exp",
       [](const Tensor& x) { return kiln::exp(x); },
       [](double x) { return std::exp(x); },
       true,
       false,
       {-5, 5, -5, 5},
       false},
      {"log",
       [](const Tensor& x) { return kiln::log(x); },
       [](double x) { return std::log(x); },
       true,
       false,
       {0.05, 10, 1, 100},
       false},
      {"sqrt",
       [](const Tensor& x) { return kiln::sqrt(x); },
       [](double x) { return std::sqrt(x); },
       true,
       false,
       {0, 10, 0, 100},
       false},
      {"rsqrt",
       [](const Tensor& x) { return kiln::rsqrt(x); },
       [](double x) { return 1.0 / std::sqrt(x); },
       true,
       false,
       {0.05, 10, 1, 100},
       false},
      {"sin",
       [](const Tensor& x) { return kiln::sin(x); },
       [](double x) { return std::sin(x); },
       true,
       false,
       {-6, 6, -10, 10},
       false},
      {"cos",
       [](const Tensor& x) { return kiln::cos(x); },
       [](double x) { return std::cos(x); },
       true,
       false,
       {-6, 6, -10, 10},
       false},
      {"tanh",
       [](const Tensor& x) { return kiln::tanh(x); },
       [](double x) { return std::tanh(x); },
       true,
       false,
       {-12, 12, -10, 10},
       false},
      {"sigmoid",
       [](const Tensor& x) { return kiln::sigmoid(x); },
       [](double x) { return 1.0 / (1.0 + std::exp(-x)); },
       true,
       false,
       {-30, 30, -20, 20},
       false},
      {"gelu",
       [](const Tensor& x) { return kiln::gelu(x); },
       ref_gelu,
       true,
       false,
       {-5, 5, -5, 5},
       false},
      {"gelu_tanh",
       [](const Tensor& x) { return kiln::gelu(x, true); },
       ref_gelu_tanh,
       true,
       false,
       {-5, 5, -5, 5},
       false},
      {"silu",
       [](const Tensor& x) { return kiln::silu(x); },
       [](double x) { return x / (1.0 + std::exp(-x)); },
       true,
       false,
       {-20, 20, -20, 20},
       false},
      {"log1p",
       [](const Tensor& x) { return kiln::log1p(x); },
       [](double x) { return std::log1p(x); },
       true,
       false,
       {-0.9, 4, 0, 20},
       false},
      {"reciprocal",
       [](const Tensor& x) { return kiln::reciprocal(x); },
       [](double x) { return 1.0 / x; },
       true,
       false,
       {-4, 4, -20, 20, true, 0.1},
       false},
  };
  return ops;
}

struct UnaryCase {
  int op;
  DType dtype;
};

std::vector<UnaryCase> unary_cases() {
  std::vector<UnaryCase> cases;
  for (int i = 0; i < static_cast<int>(unary_ops().size()); ++i) {
    for (DType d : all_dtypes()) {
      if (d == DType::Bool && !unary_ops()[static_cast<size_t>(i)].allow_bool) continue;
      cases.push_back({i, d});
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<UnaryCase>& info) {
  return std::string(unary_ops()[static_cast<size_t>(info.param.op)].name) + "_" +
         name(info.param.dtype);
}

class Unary : public ::testing::TestWithParam<UnaryCase> {
 protected:
  const UnaryOp& op() const { return unary_ops()[static_cast<size_t>(GetParam().op)]; }
  DType in() const { return GetParam().dtype; }
  DType out() const { return op().float_result && !is_float(in()) ? DType::Float32 : in(); }
  Tol tol() const { return op().exact && in() == out() ? tol_exact() : tol_pointwise(out()); }
  Host input(const Dims& sizes) const {
    Range r = op().range;
    if (in() == DType::Bool) r.nonzero = false;
    return random_host(sizes, in(), r);
  }
};

TEST_P(Unary, MatchesReferenceForShapesAndLayouts) {
  const std::vector<Dims> shapes = {{},         {0},       {1},          {7},       {3, 5},
                                    {2, 1, 33}, {4, 0, 3}, {2, 3, 4, 5}, {131, 257}};
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Stepped, Layout::Offset,
                            Layout::Permuted};
  for (const Dims& sizes : shapes) {
    const Host h = input(sizes);
    const Host expected = map(h, op().ref);
    for (Layout layout : layouts) {
      SCOPED_TRACE(dims_string(sizes) + " " + name(layout));
      const Tensor x = make(h, in(), layout);
      const Tensor y = op().fn(x);
      ASSERT_TRUE(has_meta(y, sizes, out()));
      EXPECT_TRUE(all_close(y, expected, tol()));
      EXPECT_TRUE(all_close(x, h, tol_exact())) << "the input changed";
    }
  }
}

TEST_P(Unary, ExpandedInputGivesAFreshContiguousOutput) {
  const Host h = input({1, 5});
  const Tensor x = make(h, in()).expand({4, 5});
  const Tensor y = op().fn(x);
  ASSERT_TRUE(has_meta(y, {4, 5}, out()));
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_NE(y.storage(), x.storage());
  Host expected({4, 5});
  for_each_index(expected.sizes, [&](const Dims& i) { expected.at(i) = op().ref(h.bat(i)); });
  EXPECT_TRUE(all_close(y, expected, tol()));
}

INSTANTIATE_TEST_SUITE_P(OpsAndDTypes, Unary, ::testing::ValuesIn(unary_cases()), case_name);

// IEEE special values in float32 and float64 follow the C library.
class UnarySpecialValues : public ::testing::TestWithParam<DType> {};

TEST_P(UnarySpecialValues, InfinitiesAndNaNPropagateLikeLibm) {
  const DType d = GetParam();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Host h = rounded(Host({8}, {inf, -inf, nan, 0.0, -1.0, 1e-30, 100.0, -100.0}), d);
  const Tensor x = make(h, d);
  struct Case {
    const char* name;
    Tensor (*fn)(const Tensor&);
    double (*ref)(double);
  };
  const Case cases[] = {
      {"neg", [](const Tensor& t) { return kiln::neg(t); }, [](double v) { return -v; }},
      {"abs", [](const Tensor& t) { return kiln::abs(t); }, [](double v) { return std::fabs(v); }},
      {"relu", [](const Tensor& t) { return kiln::relu(t); },
       [](double v) { return std::isnan(v) ? v
                             : v > 0       ? v
                                           : 0.0; }},
      {"exp", [](const Tensor& t) { return kiln::exp(t); }, [](double v) { return std::exp(v); }},
      {"log", [](const Tensor& t) { return kiln::log(t); }, [](double v) { return std::log(v); }},
      {"sqrt", [](const Tensor& t) { return kiln::sqrt(t); },
       [](double v) { return std::sqrt(v); }},
      {"tanh", [](const Tensor& t) { return kiln::tanh(t); },
       [](double v) { return std::tanh(v); }},
      {"sigmoid", [](const Tensor& t) { return kiln::sigmoid(t); },
       [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"reciprocal", [](const Tensor& t) { return kiln::reciprocal(t); },
       [](double v) { return 1.0 / v; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // Reference in the tensor's own precision for the tiny/huge inputs.
    const Host expected = map(h, [&](double v) { return round_to(d, c.ref(v)); });
    EXPECT_TRUE(all_close(c.fn(x), expected, tol_pointwise(d)));
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, UnarySpecialValues,
                         ::testing::Values(DType::Float32, DType::Float64), param_name);

TEST(UnaryInPlace, ReluIntoAStridedViewTouchesOnlyTheView) {
  for (DType d : numeric_dtypes()) {
    SCOPED_TRACE(name(d));
    const Host h = random_host({5, 8}, d);
    Tensor base = make(h, d);
    Tensor view = base.slice(1, 1, 8, 3);  // columns 1, 4, 7
    Tensor& r = view.relu_();
    EXPECT_TRUE(r.same(view));
    Host expected = h;
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 1; j < 8; j += 3) expected.at({i, j}) = std::max(0.0, h.at({i, j}));
    EXPECT_TRUE(all_close(base, expected, tol_exact()));
  }
}

TEST(UnaryOperators, UnaryMinusIsNeg) {
  const Host h = random_host({4, 3}, DType::Float32);
  EXPECT_TRUE(
      all_close(-make(h, DType::Float32), map(h, [](double v) { return -v; }), tol_exact()));
}

}  // namespace
}  // namespace kt
