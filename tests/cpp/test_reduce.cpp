// Reductions: sum/mean/amax/amin/max/min/argmax/var over any set of dims (none = all,
// negative dims), keepdim, strided inputs, 0-dim inputs, empty and size-1 dims, integer
// and bool sums accumulating in int64, against grouped double-precision loops.
#include <algorithm>
#include <limits>
#include <numeric>

#include "reference.h"

namespace kt {
namespace {

using Group = std::vector<double>;

Dims normalized(const Dims& dims, int64_t rank) {
  Dims out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap(d, rank));
  std::sort(out.begin(), out.end());
  return out;
}

// Groups the elements of h by output position (in row-major input order) and applies f.
Host ref_reduce(const Host& h, const Dims& dims_in, bool keepdim,
                const std::function<double(const Group&)>& f) {
  const Dims dims = normalized(dims_in, h.dim());
  Dims kept = h.sizes;
  for (int64_t d : dims) kept[static_cast<size_t>(d)] = 1;
  std::vector<Group> groups(static_cast<size_t>(numel_of(kept)));
  for_each_index(h.sizes, [&](const Dims& i) {
    Dims o = i;
    for (int64_t d : dims) o[static_cast<size_t>(d)] = 0;
    groups[static_cast<size_t>(ravel(o, kept))].push_back(h.at(i));
  });
  Host out(kept);
  for (size_t i = 0; i < groups.size(); ++i) out.v[i] = f(groups[i]);
  if (!keepdim) {
    Dims sizes;
    for (int64_t d = 0; d < h.dim(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end())
        sizes.push_back(h.sizes[static_cast<size_t>(d)]);
    out.sizes = sizes;
  }
  return out;
}

double g_sum(const Group& g) { return std::accumulate(g.begin(), g.end(), 0.0); }
double g_mean(const Group& g) {
  return g.empty() ? std::numeric_limits<double>::quiet_NaN() : g_sum(g) / double(g.size());
}
double g_max(const Group& g) { return *std::max_element(g.begin(), g.end()); }
double g_min(const Group& g) { return *std::min_element(g.begin(), g.end()); }
double g_argmax(const Group& g) {  // first occurrence of the maximum
  return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin());
}
double g_var(const Group& g, int64_t correction) {
  const double m = g_mean(g);
  double ss = 0;
  for (double x : g) ss += (x - m) * (x - m);
  return ss / std::max(0.0, static_cast<double>(g.size()) - static_cast<double>(correction));
}

// log(sum(exp(x))) in long double, shifted by the maximum; an empty group gives -inf.
double g_logsumexp(const Group& g) {
  if (g.empty()) return -std::numeric_limits<double>::infinity();
  const double m = *std::max_element(g.begin(), g.end());
  long double s = 0;
  for (double x : g) s += std::exp(static_cast<long double>(x - m));
  return m + static_cast<double>(std::log(s));
}

struct ReduceOp {
  const char* name;
  std::function<Tensor(const Tensor&, const Dims&, bool)> fn;
  std::function<double(const Group&)> ref;
  DType (*out)(DType);
  bool needs_elements;  // reducing an empty dim is an error (max/min/argmax)
  bool float_only;
  bool bool_ok;
};

DType accumulate_dtype(DType d) { return is_float(d) ? d : DType::Int64; }
DType float_dtype(DType d) { return is_float(d) ? d : DType::Float32; }
DType same_dtype(DType d) { return d; }

const std::vector<ReduceOp>& reduce_ops() {
  static const std::vector<ReduceOp> ops = {
      {"sum", [](const Tensor& x, const Dims& d, bool k) { return kiln::sum(x, d, k); }, g_sum,
       accumulate_dtype, false, false, true},
      {"mean", [](const Tensor& x, const Dims& d, bool k) { return kiln::mean(x, d, k); }, g_mean,
       float_dtype, false, false, false},
      {"amax", [](const Tensor& x, const Dims& d, bool k) { return kiln::amax(x, d, k); }, g_max,
       same_dtype, true, false, false},
      {"amin", [](const Tensor& x, const Dims& d, bool k) { return kiln::amin(x, d, k); }, g_min,
       same_dtype, true, false, false},
      {"var", [](const Tensor& x, const Dims& d, bool k) { return kiln::var(x, d, 1, k); },
       [](const Group& g) { return g_var(g, 1); }, float_dtype, false, true, false},
      {"var_correction0",
       [](const Tensor& x, const Dims& d, bool k) { return kiln::var(x, d, 0, k); },
       [](const Group& g) { return g_var(g, 0); }, float_dtype, false, true, false},
      {"var_correction2",
       [](const Tensor& x, const Dims& d, bool k) { return kiln::var(x, d, 2, k); },
       [](const Group& g) { return g_var(g, 2); }, float_dtype, false, true, false},
      {"logsumexp", [](const Tensor& x, const Dims& d, bool k) { return kiln::logsumexp(x, d, k); },
       g_logsumexp, float_dtype, false, false, false},
  };
  return ops;
}

struct ReduceCase {
  int op;
  DType dtype;
};

std::vector<ReduceCase> reduce_cases() {
  std::vector<ReduceCase> cases;
  for (int i = 0; i < static_cast<int>(reduce_ops().size()); ++i) {
    const ReduceOp& op = reduce_ops()[static_cast<size_t>(i)];
    for (DType d : all_dtypes()) {
      if (op.float_only && !is_float(d)) continue;
      if (d == DType::Bool && !op.bool_ok) continue;
      cases.push_back({i, d});
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<ReduceCase>& info) {
  return std::string(reduce_ops()[static_cast<size_t>(info.param.op)].name) + "_" +
         name(info.param.dtype);
}

struct DimsCase {
  Dims sizes;
  Dims dims;
};

const std::vector<DimsCase>& dims_cases() {
  static const std::vector<DimsCase> cases = {{{4, 5, 6}, {}},
                                              {{4, 5, 6}, {0}},
                                              {{4, 5, 6}, {1}},
                                              {{4, 5, 6}, {2}},
                                              {{4, 5, 6}, {-1}},
                                              {{4, 5, 6}, {0, 2}},
                                              {{4, 5, 6}, {2, 1}},
                                              {{4, 5, 6}, {0, 1, 2}},
                                              {{4, 5, 6}, {-3, -1}},
                                              {{3, 1, 7, 2}, {1}},
                                              {{3, 1, 7, 2}, {1, 3}},
                                              {{3, 1, 7, 2}, {0, 2}},
                                              {{7}, {0}},
                                              {{7}, {}},
                                              {{}, {}},
                                              {{1}, {0}},
                                              {{0, 4}, {0}},
                                              {{0, 4}, {1}},
                                              {{3, 0, 2}, {1}},
                                              {{3, 0, 2}, {0, 2}},
                                              {{513, 257}, {0}},
                                              {{513, 257}, {1}},
                                              {{513, 257}, {}},
                                              {{2, 3, 2049}, {-1}}};
  return cases;
}

bool reduces_empty_dim(const DimsCase& c) {
  for (int64_t d : normalized(c.dims, static_cast<int64_t>(c.sizes.size())))
    if (c.sizes[static_cast<size_t>(d)] == 0) return true;
  return c.sizes.empty() ? false : numel_of(c.sizes) == 0 && c.dims.empty();
}

class Reduce : public ::testing::TestWithParam<ReduceCase> {
 protected:
  const ReduceOp& op() const { return reduce_ops()[static_cast<size_t>(GetParam().op)]; }
  DType d() const { return GetParam().dtype; }
};

TEST_P(Reduce, AnyDimsKeepdimAndLayouts) {
  const DType out = op().out(d());
  for (const DimsCase& c : dims_cases()) {
    if (op().needs_elements && reduces_empty_dim(c)) continue;
    const Host h = random_host(c.sizes, d());
    for (bool keepdim : {false, true}) {
      const Host expected = ref_reduce(h, c.dims, keepdim, op().ref);
      Tol tol = is_float(out) ? tol_reduce(out) : tol_exact();
      if (std::string(op().name) == "sum" && expected.numel() > 0) {
        // A sum of n values of either sign has magnitude ~sqrt(n): allow 1e-4 of that
        // even when this particular sum happens to cancel.
        tol.atol *= std::sqrt(std::max<double>(1.0, double(h.numel()) / double(expected.numel())));
      }
      for (Layout layout : {Layout::Contiguous, Layout::Permuted, Layout::Stepped}) {
        SCOPED_TRACE(dims_string(c.sizes) + " dims " + dims_string(c.dims) +
                     (keepdim ? " keepdim " : " ") + name(layout));
        const Tensor x = make(h, d(), layout);
        const Tensor y = op().fn(x, c.dims, keepdim);
        ASSERT_TRUE(has_meta(y, expected.sizes, out));
        EXPECT_TRUE(all_close(y, expected, tol));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpsAndDTypes, Reduce, ::testing::ValuesIn(reduce_cases()), case_name);

// ---- max/min with a dim, of everything, and argmax

class ReduceOneDim : public ::testing::TestWithParam<DType> {};

TEST_P(ReduceOneDim, MaxMinArgmaxAlongEachDim) {
  const DType d = GetParam();
  const Host h = random_host({4, 5, 6}, d);  // integers and 16-bit floats tie often
  for (int64_t dim = -3; dim < 3; ++dim) {
    for (bool keepdim : {false, true}) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + (keepdim ? " keepdim " : " ") + name(layout));
        const Tensor x = make(h, d, layout);
        const Host emax = ref_reduce(h, {dim}, keepdim, g_max);
        const Host emin = ref_reduce(h, {dim}, keepdim, g_min);
        const Host earg = ref_reduce(h, {dim}, keepdim, g_argmax);
        const Tensor mx = kiln::max(x, dim, keepdim);
        const Tensor mn = kiln::min(x, dim, keepdim);
        const Tensor am = kiln::argmax(x, dim, keepdim);
        ASSERT_TRUE(has_meta(mx, emax.sizes, d));
        ASSERT_TRUE(has_meta(mn, emin.sizes, d));
        ASSERT_TRUE(has_meta(am, earg.sizes, DType::Int64));
        EXPECT_TRUE(all_close(mx, emax, tol_exact()));
        EXPECT_TRUE(all_close(mn, emin, tol_exact()));
        EXPECT_TRUE(all_close(am, earg, tol_exact())) << "argmax must return the first maximum";
      }
    }
  }
  // Of all elements (0-dim results); argmax without a dim indexes the flattened tensor.
  const Tensor x = make(h, d, Layout::Permuted);
  const Tensor mx = kiln::max(x), mn = kiln::min(x), am = kiln::argmax(x);
  ASSERT_TRUE(has_meta(mx, {}, d));
  ASSERT_TRUE(has_meta(mn, {}, d));
  ASSERT_TRUE(has_meta(am, {}, DType::Int64));
  EXPECT_EQ(mx.item().to_double(), g_max(h.v));
  EXPECT_EQ(mn.item().to_double(), g_min(h.v));
  EXPECT_EQ(am.item().to_int(), static_cast<int64_t>(g_argmax(h.v)));
}

INSTANTIATE_TEST_SUITE_P(NumericDTypes, ReduceOneDim, ::testing::ValuesIn(numeric_dtypes()),
                         param_name);

TEST(ReduceMisc, ArgmaxOfAllTiesIsZeroAndOfLaterMaxIsItsIndex) {
  const Tensor same = kiln::full({3, 4}, 2.0, DType::Float32);
  EXPECT_EQ(kiln::argmax(same).item().to_int(), 0);
  EXPECT_TRUE(all_close(kiln::argmax(same, 1), Host({3}, {0, 0, 0}), tol_exact()));
  const Host h = random_host({1000}, DType::Float32, {-1.0, 1.0});
  Host g = h;
  const int64_t where = uniform_int(0, 999);
  g.v[static_cast<size_t>(where)] = 5.0;
  EXPECT_EQ(kiln::argmax(make(g, DType::Float32)).item().to_int(), where);
}

// ---- integer accumulation and precision

TEST(ReduceMisc, IntegerSumsAccumulateInInt64WithoutOverflow) {
  std::vector<int32_t> v(64);
  int64_t total = 0;
  for (auto& x : v) {
    x = static_cast<int32_t>(uniform_int(1 << 29, 1 << 30));
    total += x;
  }
  ASSERT_GT(total, int64_t{1} << 31);
  const Tensor s = kiln::sum(kiln::from_vector<int32_t>(v, {64}));
  ASSERT_TRUE(has_meta(s, {}, DType::Int64));
  EXPECT_EQ(s.to_vector<int64_t>()[0], total);

  // int64 sums stay exact past 2^53.
  const int64_t big = (int64_t{1} << 60) + 1;
  const Tensor s64 = kiln::sum(kiln::from_vector<int64_t>({big, 3, -1}, {3}));
  EXPECT_EQ(s64.to_vector<int64_t>()[0], big + 2);
  // int64 amax exact past 2^53.
  const Tensor m64 = kiln::amax(kiln::from_vector<int64_t>({big, big - 1, -big}, {3}));
  EXPECT_EQ(m64.to_vector<int64_t>()[0], big);
}

TEST(ReduceMisc, BoolSumCountsTrueValues) {
  const Host h = random_host({37, 11}, DType::Bool);
  const Tensor b = make(h, DType::Bool);
  const Tensor s = kiln::sum(b, {0});
  ASSERT_TRUE(has_meta(s, {11}, DType::Int64));
  EXPECT_TRUE(all_close(s, ref_reduce(h, {0}, false, g_sum), tol_exact()));
}

TEST(ReduceMisc, HalfPrecisionSumsAccumulateInFloat) {
  // 4096 values in [0, 1): a float16 accumulator would stall once the sum reaches 2048
  // (its spacing there is 2); float accumulation is accurate to the output rounding.
  for (DType d : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(name(d));
    const Host h = random_host({4096}, d, {0.0, 1.0});
    EXPECT_TRUE(all_close(kiln::sum(make(h, d)), Host({}, {g_sum(h.v)}), tol_reduce(d)));
    EXPECT_TRUE(all_close(kiln::mean(make(h, d)), Host({}, {g_mean(h.v)}), tol_reduce(d)));
  }
}

TEST(ReduceMisc, LargeFloat32SumIsAccurate) {
  const Host h = random_host({100000}, DType::Float32, {0.0, 1.0});
  EXPECT_TRUE(all_close(kiln::sum(make(h, DType::Float32)), Host({}, {g_sum(h.v)}),
                        tol_reduce(DType::Float32)));
  // Variance of values with a large common offset (a naive sum-of-squares loses it).
  const Host off = map(h, [](double x) { return round_to(DType::Float32, 1000.0 + x); });
  EXPECT_TRUE(
      all_close(kiln::var(make(off, DType::Float32)), Host({}, {g_var(off.v, 1)}), {1e-3, 1e-4}));
}

TEST(ReduceMisc, EmptyReductions) {
  const Tensor e = make(Host({0, 3}), DType::Float32);
  EXPECT_TRUE(all_close(kiln::sum(e), Host({}, {0.0}), tol_exact()));
  EXPECT_TRUE(all_close(kiln::sum(e, {0}), Host({3}, {0, 0, 0}), tol_exact()));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(all_close(kiln::mean(e, {0}), Host({3}, {nan, nan, nan}), tol_exact()));
  EXPECT_TRUE(has_meta(kiln::amax(e, {1}), {0}, DType::Float32));
  const Tensor ei = make(Host({0}), DType::Int32);
  EXPECT_TRUE(has_meta(kiln::sum(ei), {}, DType::Int64));
  EXPECT_EQ(kiln::sum(ei).to_vector<int64_t>()[0], 0);
  // Reducing over an empty dim has no maximum.
  EXPECT_THROW(kiln::amax(e, {0}), kiln::Error);
  EXPECT_THROW(kiln::max(e), kiln::Error);
  EXPECT_THROW(kiln::argmax(e), kiln::Error);
}

// PyTorch's logsumexp: max-subtracted (no overflow for large values); an infinite maximum
// is not subtracted, so a row of -inf gives -inf and a +inf gives +inf; NaN wins.
TEST(ReduceMisc, LogSumExpOfLargeAndInfiniteValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Host x({5, 3}, {1000, 1000, -inf,  // 1000 + log 2
                        -inf, -inf, -inf,  // -inf
                        inf, 1, -inf,      // inf
                        inf, inf, 2,       // inf
                        nan, inf, 1});     // nan
  const Host expected({5}, {1000 + std::log(2.0), -inf, inf, inf, nan});
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16}) {
    SCOPED_TRACE(name(d));
    EXPECT_TRUE(all_close(kiln::logsumexp(make(x, d), {1}), expected, tol_reduce(d)));
    EXPECT_TRUE(
        all_close(kiln::logsumexp(make(x, d, Layout::Transposed), {1}), expected, tol_reduce(d)));
  }
  const Tensor e = make(Host({0, 3}), DType::Float32);
  EXPECT_TRUE(all_close(kiln::logsumexp(e, {0}), Host({3}, {-inf, -inf, -inf}), tol_exact()));
}

TEST(ReduceMisc, VarianceOfOneElementWithCorrectionIsNaN) {
  const Tensor one = kiln::from_vector<float>({3.5f}, {1});
  EXPECT_TRUE(std::isnan(kiln::var(one).item().to_double()));
  EXPECT_EQ(kiln::var(one, {}, 0).item().to_double(), 0.0);
}

TEST(ReduceMisc, ReductionsOfExpandedInputs) {
  const Host h = random_host({5, 1}, DType::Float32);
  const Tensor x = make(h, DType::Float32).expand({5, 8});
  Host full({5, 8});
  for_each_index(full.sizes, [&](const Dims& i) { full.at(i) = h.bat(i); });
  EXPECT_TRUE(all_close(kiln::sum(x, {1}), ref_reduce(full, {1}, false, g_sum),
                        tol_reduce(DType::Float32)));
  EXPECT_TRUE(all_close(kiln::var(x, {0}),
                        ref_reduce(full, {0}, false, [](const Group& g) { return g_var(g, 1); }),
                        tol_reduce(DType::Float32)));
}

}  // namespace
}  // namespace kt
