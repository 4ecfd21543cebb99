// Factories (zeros/ones/full/empty/arange/scalar_tensor) for every dtype and shape, and
// the random generator: rand in [0, 1) and randn ~ N(0, 1) over 1e5 samples (moments,
// histograms, Kolmogorov-Smirnov), reproducibility per seed, fresh numbers per call, and
// the documented Philox4x32-10 stream, checked against an implementation written here
// (itself checked against the Random123 known-answer vectors).
#include <algorithm>
#include <array>
#include <numeric>

#include "reference.h"

namespace kt {
namespace {

class Factory : public ::testing::TestWithParam<DType> {};

TEST_P(Factory, ZerosOnesFullEmpty) {
  const DType d = GetParam();
  const double v = d == DType::Bool ? 1.0
                   : is_int(d)      ? static_cast<double>(uniform_int(-1000, 1000))
                                    : round_to(d, round_to(DType::Float32, uniform(-50, 50)));
  const kiln::Scalar sv = d == DType::Bool ? kiln::Scalar(true)
                          : is_int(d)      ? kiln::Scalar(static_cast<int64_t>(v))
                                           : kiln::Scalar(v);
  for (const Dims& sizes : {Dims{}, Dims{0}, Dims{3}, Dims{2, 3, 4}, Dims{1, 0, 5}, Dims{70000}}) {
    SCOPED_TRACE(dims_string(sizes));
    const Host zero(sizes);
    const Host one(sizes, std::vector<double>(static_cast<size_t>(numel_of(sizes)), 1.0));
    const Host full(sizes, std::vector<double>(static_cast<size_t>(numel_of(sizes)), v));
    const Tensor z = kiln::zeros(sizes, d), o = kiln::ones(sizes, d), f = kiln::full(sizes, sv, d);
    const Tensor e = kiln::empty(sizes, d);
    for (const Tensor* t : {&z, &o, &f, &e}) {
      ASSERT_TRUE(has_meta(*t, sizes, d));
      EXPECT_TRUE(t->is_contiguous());
      EXPECT_EQ(t->strides(), row_major_strides(sizes));
      EXPECT_TRUE(t->device().is_cpu());
      EXPECT_EQ(t->numel(), numel_of(sizes));
    }
    EXPECT_TRUE(all_close(z, zero, tol_exact()));
    EXPECT_TRUE(all_close(o, one, tol_exact()));
    EXPECT_TRUE(all_close(f, full, tol_exact()));
  }
  const Tensor s = kiln::scalar_tensor(sv, d);
  ASSERT_TRUE(has_meta(s, {}, d));
  EXPECT_EQ(s.item().to_double(), v);
}

TEST_P(Factory, Arange) {
  const DType d = GetParam();
  if (d == DType::Bool) GTEST_SKIP() << "arange has no bool form";
  struct Case {
    double start, end, step;
  };
  std::vector<Case> cases = {{0, 10, 1}, {2, 20, 3}, {10, 0, -3}, {5, 5, 1}, {-4, 4, 2}};
  if (is_float(d)) {
    cases.push_back({0, 1, 0.125});
    cases.push_back({1, 2.5, 0.5});
    cases.push_back({0, 1, 0.1});
    cases.push_back({3, -2, -0.75});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.start) + ", " + std::to_string(c.end) + ", " +
                 std::to_string(c.step));
    const auto n = static_cast<int64_t>(std::ceil((c.end - c.start) / c.step));
    Host expected({std::max<int64_t>(n, 0)});
    for (int64_t i = 0; i < expected.numel(); ++i)
      expected.v[static_cast<size_t>(i)] = round_to(d, c.start + static_cast<double>(i) * c.step);
    const bool integral = c.start == std::trunc(c.start) && c.end == std::trunc(c.end) &&
                          c.step == std::trunc(c.step);
    auto sc = [&](double x) {
      return integral ? kiln::Scalar(static_cast<int64_t>(x)) : kiln::Scalar(x);
    };
    const Tensor y = kiln::arange(sc(c.start), sc(c.end), sc(c.step), d);
    ASSERT_TRUE(has_meta(y, expected.sizes, d));
    EXPECT_TRUE(all_close(y, expected, tol_pointwise(d)));
  }
  const Tensor y = kiln::arange(7, d);
  EXPECT_TRUE(all_close(y, Host({7}, {0, 1, 2, 3, 4, 5, 6}), tol_exact()));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Factory, ::testing::ValuesIn(all_dtypes()), param_name);

// ---- random

constexpr int64_t kSamples = 100000;

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Kolmogorov-Smirnov distance of a sample from a continuous CDF.
double ks_distance(std::vector<double> v, double (*cdf)(double)) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double dmax = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double f = cdf(v[i]);
    dmax = std::max({dmax, f - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - f});
  }
  return dmax;
}

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double var_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size() - 1);
}
double lag1_correlation(const std::vector<double>& v) {
  const double m = mean_of(v), var = var_of(v);
  double c = 0;
  for (size_t i = 0; i + 1 < v.size(); ++i) c += (v[i] - m) * (v[i + 1] - m);
  return c / static_cast<double>(v.size() - 1) / var;
}

class Random : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { kiln::manual_seed(static_cast<uint64_t>(uniform_int(0, 1ll << 62))); }
};

TEST_P(Random, RandIsUniformOnTheHalfOpenUnitInterval) {
  const DType d = GetParam();
  const Tensor x = kiln::rand({kSamples}, d);
  ASSERT_TRUE(has_meta(x, {kSamples}, d));
  const std::vector<double> v = x.to_vector<double>();
  const double lo = *std::min_element(v.begin(), v.end());
  const double hi = *std::max_element(v.begin(), v.end());
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0) << "rand must never return 1 (also after rounding to " << name(d) << ")";
  EXPECT_NEAR(mean_of(v), 0.5, 0.005);
  EXPECT_NEAR(var_of(v), 1.0 / 12.0, 0.002);
  std::array<int64_t, 10> bins{};
  for (double u : v) bins[static_cast<size_t>(std::clamp(u * 10.0, 0.0, 9.0))]++;
  for (size_t b = 0; b < bins.size(); ++b)
    EXPECT_NEAR(static_cast<double>(bins[b]), kSamples / 10.0, 600.0) << "bin " << b;
  EXPECT_LT(std::fabs(lag1_correlation(v)), 0.02);
  if (d == DType::Float32 || d == DType::Float64) {
    EXPECT_LT(ks_distance(v, [](double u) { return std::clamp(u, 0.0, 1.0); }), 0.0087);
  }
}

TEST_P(Random, RandnIsStandardNormal) {
  const DType d = GetParam();
  const Tensor x = kiln::randn({kSamples}, d);
  ASSERT_TRUE(has_meta(x, {kSamples}, d));
  const std::vector<double> v = x.to_vector<double>();
  for (double z : v) ASSERT_TRUE(std::isfinite(z));
  EXPECT_NEAR(mean_of(v), 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(var_of(v)), 1.0, 0.015);
  const double within1 = static_cast<double>(std::count_if(
                             v.begin(), v.end(), [](double z) { return std::fabs(z) <= 1.0; })) /
                         kSamples;
  EXPECT_NEAR(within1, 0.682689, 0.009);
  const double beyond3 = static_cast<double>(std::count_if(
                             v.begin(), v.end(), [](double z) { return std::fabs(z) > 3.0; })) /
                         kSamples;
  EXPECT_NEAR(beyond3, 0.0027, 0.0012);
  EXPECT_LT(std::fabs(lag1_correlation(v)), 0.02);
  if (d == DType::Float32 || d == DType::Float64) {
    EXPECT_LT(ks_distance(v, normal_cdf), 0.0087);
  }
}

TEST_P(Random, SameSeedSameNumbersAndSuccessiveCallsDiffer) {
  const DType d = GetParam();
  const auto seed = static_cast<uint64_t>(uniform_int(0, 1ll << 62));
  kiln::manual_seed(seed);
  const std::vector<double> a1 = kiln::rand({4, 250}, d).to_vector<double>();
  const std::vector<double> b1 = kiln::randn({1000}, d).to_vector<double>();
  const std::vector<double> a2 = kiln::rand({1000}, d).to_vector<double>();
  kiln::manual_seed(seed);
  EXPECT_EQ(kiln::rand({1000}, d).to_vector<double>(), a1) << "same seed, same numbers "
                                                              "(whatever the shape)";
  EXPECT_EQ(kiln::randn({1000}, d).to_vector<double>(), b1);
  EXPECT_EQ(kiln::rand({1000}, d).to_vector<double>(), a2);
  // Successive calls give fresh numbers.
  int64_t equal = 0;
  for (size_t i = 0; i < a1.size(); ++i) equal += a1[i] == a2[i];
  EXPECT_LT(equal, 30) << "two successive rand calls repeat numbers";
  // Another seed gives other numbers.
  kiln::manual_seed(seed + 1);
  const std::vector<double> c = kiln::rand({1000}, d).to_vector<double>();
  equal = 0;
  for (size_t i = 0; i < a1.size(); ++i) equal += a1[i] == c[i];
  EXPECT_LT(equal, 30) << "seeds " << seed << " and " << seed + 1 << " agree";
}

TEST_P(Random, ShapesIncludingEmptyAndZeroDim) {
  const DType d = GetParam();
  EXPECT_TRUE(has_meta(kiln::rand({0}, d), {0}, d));
  EXPECT_TRUE(has_meta(kiln::randn({3, 0}, d), {3, 0}, d));
  const Tensor s = kiln::rand({}, d);
  ASSERT_TRUE(has_meta(s, {}, d));
  const double u = s.item().to_double();
  EXPECT_TRUE(u >= 0.0 && u < 1.0);
  EXPECT_TRUE(kiln::randn({2, 3, 4}, d).is_contiguous());
}

INSTANTIATE_TEST_SUITE_P(Floats, Random, ::testing::ValuesIn(float_dtypes()), param_name);

// ---- the Philox4x32-10 stream (ops/philox.h documents the mapping)

struct U4 {
  uint32_t v[4];
};

U4 philox4x32_10(U4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * ctr.v[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * ctr.v[2];
    const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = U4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

TEST(Philox, ReferenceMatchesRandom123KnownAnswers) {
  struct Kat {
    U4 ctr;
    uint32_t k0, k1;
    U4 out;
  };
  const Kat kats[] = {{{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
                      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
                       0xffffffff,
                       0xffffffff,
                       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
                      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
                       0xa4093822,
                       0x299f31d0,
                       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}}};
  for (const Kat& k : kats) {
    const U4 r = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out.v[i]) << "word " << i;
  }
}

double uniform53(uint32_t a, uint32_t b) {
  const uint64_t bits = ((uint64_t{a} << 21) ^ (b >> 11)) & ((uint64_t{1} << 53) - 1);
  return std::ldexp(static_cast<double>(bits), -53);
}

TEST(Philox, RandFollowsTheDocumentedCounterMapping) {
  // Element i of a random op with state (seed, offset): counter (i, offset), key seed.
  // manual_seed restarts the offset at 0; each random op takes the next offset.
  const auto seed = static_cast<uint64_t>(uniform_int(0, 1ll << 62)) | (uint64_t{1} << 40);
  kiln::manual_seed(seed);
  const std::vector<double> first = kiln::rand({257}, DType::Float64).to_vector<double>();
  const std::vector<double> second = kiln::randn({64}, DType::Float64).to_vector<double>();
  auto draw = [&](uint64_t offset, uint64_t i) {
    return philox4x32_10(U4{{static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32),
                             static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}},
                         static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  };
  for (uint64_t i = 0; i < first.size(); ++i) {  // float64: two elements per draw
    const U4 r = draw(0, i / 2);
    ASSERT_EQ(first[i], uniform53(r.v[2 * (i % 2)], r.v[2 * (i % 2) + 1])) << "rand element " << i;
  }
  for (uint64_t i = 0; i < second.size(); ++i) {
    const U4 r = draw(1, i);
    const double u1 = uniform53(r.v[0], r.v[1]), u2 = uniform53(r.v[2], r.v[3]);
    const double z = std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
    ASSERT_NEAR(second[i], z, 1e-12 * std::max(1.0, std::fabs(z))) << "randn element " << i;
  }
  // Narrower dtypes draw on their own grid, four elements per draw: element i is the top
  // `bits` bits of word i % 4 of draw i / 4 times 2^-bits (24 for float32, 11 for float16,
  // 8 for bfloat16), exact in the dtype.
  const std::pair<DType, int> grids[] = {
      {DType::Float32, 24}, {DType::Float16, 11}, {DType::BFloat16, 8}};
  uint64_t offset = 2;
  for (const auto& [d, bits] : grids) {
    SCOPED_TRACE(name(d));
    const std::vector<double> v = kiln::rand({300}, d).to_vector<double>();
    for (uint64_t i = 0; i < v.size(); ++i) {
      const U4 r = draw(offset, i / 4);
      ASSERT_EQ(v[i], std::ldexp(static_cast<double>(r.v[i % 4] >> (32 - bits)), -bits))
          << "rand element " << i;
    }
    ++offset;
  }
}

}  // namespace
}  // namespace kt
