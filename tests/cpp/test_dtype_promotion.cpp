// Type promotion (PyTorch's result_type with dimensioned tensors, 0-dim tensors and
// scalars), dtype conversion with to(dtype), and float16/bfloat16 rounding (nearest even,
// subnormals, overflow to inf, NaN), all against rules written out here.
#include <bit>
#include <cstring>
#include <optional>

#include "reference.h"

namespace kt {
namespace {

// ---- PyTorch's promotion rules, from c10/core/ScalarType.h and
// aten/src/ATen/native/TypeProperties.cpp, written independently of kiln.

int category(DType d) { return d == DType::Bool ? 0 : is_int(d) ? 1 : 2; }

int float_rank(DType d) {
  switch (d) {
    case DType::Float16:
      return 0;
    case DType::BFloat16:
      return 0;
    case DType::Float32:
      return 1;
    default:
      return 2;
  }
}

DType ref_promote(DType a, DType b) {
  if (a == b) return a;
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if (category(a) == 1) return DType::Int64;                            // int32 with int64
  if (float_rank(a) == 0 && float_rank(b) == 0) return DType::Float32;  // f16 with bf16
  return float_rank(a) > float_rank(b) ? a : b;
}

using Opt = std::optional<DType>;
Opt promote_opt(Opt a, Opt b) {
  if (!a) return b;
  if (!b) return a;
  return ref_promote(*a, *b);
}
// combine_categories(higher, lower) from TypeProperties.cpp.
Opt combine(Opt higher, Opt lower) {
  if (higher && category(*higher) == 2) return higher;
  if ((higher && *higher == DType::Bool) || (lower && category(*lower) == 2))
    return promote_opt(higher, lower);
  if (higher) return higher;
  return lower;
}

enum class Operand { Dim, Zero };
struct State {
  Opt dim, zero, wrapped;
};
void add_tensor(State& s, DType d, Operand k) {
  if (k == Operand::Dim)
    s.dim = promote_opt(s.dim, d);
  else
    s.zero = promote_opt(s.zero, d);
}
// A wrapped number: bool -> bool, int -> int64, float -> the default dtype (float32).
void add_scalar(State& s, const kiln::Scalar& v) {
  const DType d = v.is_bool() ? DType::Bool : v.is_integral() ? DType::Int64 : DType::Float32;
  s.wrapped = promote_opt(s.wrapped, d);
}
DType resolve(const State& s) { return *combine(s.dim, combine(s.zero, s.wrapped)); }

Tensor tensor_of(const Host& h, DType d, Operand k) {
  return make(k == Operand::Zero ? Host({}, {h.v[0]}) : h, d);
}

std::string operand_name(Operand k) { return k == Operand::Dim ? "dim" : "0-dim"; }

// ---- promote_types and result_type for every pair

TEST(Promotion, PromoteTypesMatchesPyTorchForEveryPair) {
  for (DType a : all_dtypes()) {
    for (DType b : all_dtypes()) {
      EXPECT_EQ(name(kiln::promote_types(a, b)), name(ref_promote(a, b)))
          << name(a) << " with " << name(b);
    }
  }
}

TEST(Promotion, ResultTypeOfTwoTensorsWithZeroDimRules) {
  for (DType da : all_dtypes()) {
    for (DType db : all_dtypes()) {
      for (Operand ka : {Operand::Dim, Operand::Zero}) {
        for (Operand kb : {Operand::Dim, Operand::Zero}) {
          State s;
          add_tensor(s, da, ka);
          add_tensor(s, db, kb);
          const DType expected = resolve(s);
          const Tensor a = tensor_of(random_host({3}, da), da, ka);
          const Tensor b = tensor_of(random_host({3}, db), db, kb);
          EXPECT_EQ(name(kiln::result_type(a, b)), name(expected))
              << operand_name(ka) << " " << name(da) << " with " << operand_name(kb) << " "
              << name(db);
        }
      }
    }
  }
}

TEST(Promotion, ResultTypeOfTensorAndScalar) {
  const kiln::Scalar scalars[] = {kiln::Scalar(true), kiln::Scalar(3), kiln::Scalar(2.5)};
  for (DType d : all_dtypes()) {
    for (Operand k : {Operand::Dim, Operand::Zero}) {
      for (const kiln::Scalar& s : scalars) {
        State st;
        add_tensor(st, d, k);
        add_scalar(st, s);
        const Tensor t = tensor_of(random_host({3}, d), d, k);
        EXPECT_EQ(name(kiln::result_type(t, s)), name(resolve(st)))
            << operand_name(k) << " " << name(d) << " with scalar " << s.to_double();
      }
    }
  }
}

// The binary ops use the promoted dtype for their output and compute in it.
TEST(Promotion, AddUsesThePromotedTypeAndValues) {
  for (DType da : all_dtypes()) {
    for (DType db : all_dtypes()) {
      if (da == DType::Bool && db == DType::Bool) continue;  // bool + bool: not arithmetic
      for (Operand kb : {Operand::Dim, Operand::Zero}) {
        SCOPED_TRACE(name(da) + " + " + operand_name(kb) + " " + name(db));
        State s;
        add_tensor(s, da, Operand::Dim);
        add_tensor(s, db, kb);
        const DType r = resolve(s);
        const Host ha = random_host({2, 5}, da);
        Host hb = random_host({2, 5}, db);
        if (kb == Operand::Zero) hb = Host({}, {hb.v[0]});
        const Tensor out = kiln::add(make(ha, da), make(hb, db));
        ASSERT_EQ(name(out.dtype()), name(r));
        // Each operand converts to r, then the sum rounds to r.
        const Host expected = map2(rounded(ha, r), rounded(hb, r),
                                   [r](double x, double y) { return round_to(r, x + y); });
        EXPECT_TRUE(all_close(out, expected, tol_pointwise(r)));
      }
    }
  }
}

TEST(Promotion, ScalarsOnEitherSideFollowWrappedNumberRules) {
  const kiln::Scalar scalars[] = {kiln::Scalar(true), kiln::Scalar(3), kiln::Scalar(-2),
                                  kiln::Scalar(2.5), kiln::Scalar(-0.75)};
  for (DType d : all_dtypes()) {
    for (const kiln::Scalar& s : scalars) {
      if (d == DType::Bool && s.is_bool()) continue;
      SCOPED_TRACE(name(d) + " with scalar " + std::to_string(s.to_double()));
      State st;
      add_tensor(st, d, Operand::Dim);
      add_scalar(st, s);
      const DType r = resolve(st);
      const Host h = random_host({7}, d);
      const Tensor x = make(h, d);
      const double sv = round_to(r, s.to_double());
      const Host hr = rounded(h, r);
      const Tensor right = kiln::mul(x, s);
      const Tensor left = kiln::sub(s, x);
      ASSERT_EQ(name(right.dtype()), name(r));
      ASSERT_EQ(name(left.dtype()), name(r));
      EXPECT_TRUE(all_close(right, map(hr, [&](double v) { return round_to(r, v * sv); }),
                            tol_pointwise(r)));
      EXPECT_TRUE(all_close(left, map(hr, [&](double v) { return round_to(r, sv - v); }),
                            tol_pointwise(r)));
    }
  }
}

TEST(Promotion, Float16TensorTimesLargeScalarStaysFloat16AndOverflows) {
  const Host h({3}, {100.0, -200.0, 0.5});
  const Tensor y = kiln::mul(make(h, DType::Float16), 1000.0);
  ASSERT_EQ(name(y.dtype()), "float16");
  // 1e5 and -2e5 exceed float16's max (65504): they round to +-inf; 500 is exact.
  EXPECT_TRUE(all_close(
      y, Host({3}, {round_to(DType::Float16, 1e5), round_to(DType::Float16, -2e5), 500.0}),
      tol_exact()));
  EXPECT_TRUE(std::isinf(round_to(DType::Float16, 1e5)));  // the reference agrees
}

TEST(Promotion, Int64ArithmeticIsExactBeyondDoublePrecision) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable in double
  const std::vector<int64_t> a = {big, -big, big + 2};
  const Tensor x = kiln::from_vector<int64_t>(a, {3});
  const Tensor zero_dim = kiln::from_vector<int64_t>({3}, {});
  const std::vector<int64_t> sum = kiln::add(x, zero_dim).to_vector<int64_t>();
  const std::vector<int64_t> prod = kiln::mul(x, int64_t{1}).to_vector<int64_t>();
  const std::vector<int64_t> plus = kiln::add(x, int64_t{5}).to_vector<int64_t>();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(sum[i], a[i] + 3);
    EXPECT_EQ(prod[i], a[i]);
    EXPECT_EQ(plus[i], a[i] + 5);
  }
}

TEST(Promotion, IntTensorWithFloatScalarComputesInFloat) {
  const Host h = random_host({9}, DType::Int32, {0, 0, -50, 50});
  const Tensor y = kiln::add(make(h, DType::Int32), 0.5);
  ASSERT_EQ(name(y.dtype()), "float32");
  EXPECT_TRUE(all_close(y, map(h, [](double v) { return v + 0.5; }), tol_exact()));
  const Tensor q = kiln::div(make(h, DType::Int32), 4);  // true division
  ASSERT_EQ(name(q.dtype()), "float32");
  EXPECT_TRUE(all_close(q, map(h, [](double v) { return v / 4.0; }), tol_exact()));
}

// ---- to(dtype)

Host conversion_source(DType src, DType dst) {
  Range r{-100.0, 100.0, -5000, 5000};
  Host h = random_host({64}, src, r);
  // Double rounding f64 -> f32 -> f16 is what PyTorch does too: give f64 sources that
  // go to 16 bits values exact in float32 so the answer is unambiguous.
  if (src == DType::Float64 && (dst == DType::Float16 || dst == DType::BFloat16))
    h = rounded(h, DType::Float32);
  // Make some zeros (bool conversion) and exact integers.
  for (size_t i = 0; i < h.v.size(); i += 5) h.v[i] = 0.0;
  for (size_t i = 2; i < h.v.size(); i += 7) h.v[i] = round_to(src, std::trunc(h.v[i]));
  return h;
}

class ToDType : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(ToDType, ConvertsLikeACastWithRoundToNearestEven) {
  const auto [src, dst] = GetParam();
  const Host h = conversion_source(src, dst);
  for (Layout layout : {Layout::Contiguous, Layout::Stepped}) {
    SCOPED_TRACE(name(layout));
    const Tensor x = make(h, src, layout);
    const Tensor y = x.to(dst);
    ASSERT_TRUE(has_meta(y, h.sizes, dst));
    if (src == dst) {
      EXPECT_TRUE(y.same(x));
    } else {
      EXPECT_TRUE(y.is_contiguous());
    }
    EXPECT_TRUE(all_close(y, rounded(h, dst), tol_exact()));
    EXPECT_TRUE(all_close(x, h, tol_exact()));  // the source is untouched
  }
}

std::string pair_name(const ::testing::TestParamInfo<std::tuple<DType, DType>>& info) {
  return name(std::get<0>(info.param)) + "_to_" + name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllPairs, ToDType,
                         ::testing::Combine(::testing::ValuesIn(all_dtypes()),
                                            ::testing::ValuesIn(all_dtypes())),
                         pair_name);

// ---- 16-bit floats bit by bit

class SixteenBit : public ::testing::TestWithParam<DType> {
 protected:
  uint16_t bits(double x) const {
    return GetParam() == DType::Float16 ? half_bits(x) : bf16_bits(x);
  }
  double value(uint16_t b) const {
    return GetParam() == DType::Float16 ? half_value(b) : bf16_value(b);
  }
};

// Every one of the 65536 bit patterns widens exactly to float32 and float64.
TEST_P(SixteenBit, EveryBitPatternWidensExactly) {
  const DType d = GetParam();
  Tensor raw = Tensor::make({65536}, d, kiln::kCPU);
  auto* p = static_cast<uint16_t*>(raw.data_ptr());
  Host expected({65536});
  for (uint32_t b = 0; b < 65536; ++b) {
    p[b] = static_cast<uint16_t>(b);
    expected.v[b] = value(static_cast<uint16_t>(b));
  }
  for (DType wide : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(name(wide));
    const Tensor w = raw.to(wide);
    EXPECT_TRUE(all_close(w, expected, tol_exact()));
    // Signs of zero survive.
    const std::vector<double> v = w.to_vector<double>();
    EXPECT_FALSE(std::signbit(v[0]));
    EXPECT_TRUE(std::signbit(v[0x8000]));
  }
}

// Narrowing float32 -> 16 bits rounds to nearest even: random float32 bit patterns
// across the whole exponent range, plus the edge cases.
TEST_P(SixteenBit, NarrowingFromFloat32RoundsToNearestEven) {
  const DType d = GetParam();
  const bool half = d == DType::Float16;
  std::vector<float> values;
  for (int i = 0; i < 20000; ++i) {
    const auto u = static_cast<uint32_t>(uniform_int(0, 0xffffffffll));
    const float f = std::bit_cast<float>(u);
    if (!std::isnan(f)) values.push_back(f);
  }
  // Values near float16's range, where rounding, subnormals and overflow happen.
  for (int i = 0; i < 5000; ++i) {
    const double mag = std::ldexp(uniform(1.0, 2.0), static_cast<int>(uniform_int(-27, 17)));
    values.push_back(static_cast<float>(uniform_int(0, 1) ? mag : -mag));
  }
  const double one = 1.0, m = half ? 1024.0 : 128.0;                        // 2^mantissa bits
  const double ulp1 = one / m;                                              // spacing just above 1
  const double tiny = half ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);  // min subnormal
  const double max_finite = half ? 65504.0 : std::ldexp(2.0 - 1.0 / 128.0, 127);
  const double max_ulp = half ? 32.0 : std::ldexp(1.0, 127 - 7);
  const double edges[] = {0.0,
                          -0.0,
                          1.0,
                          1.0 + ulp1 / 2,              // tie -> 1 (even)
                          1.0 + 3 * ulp1 / 2,          // tie -> 1 + 2 ulp (even)
                          1.0 + ulp1 / 2 + ulp1 / 64,  // above the tie -> up
                          1.0 + ulp1 / 2 - ulp1 / 64,  // below the tie -> down
                          max_finite,
                          max_finite + max_ulp / 2 - max_ulp / 64,  // rounds down to max
                          max_finite + max_ulp / 2,                 // tie -> overflow to inf
                          -(max_finite + max_ulp / 2),
                          tiny,
                          tiny / 2,  // tie with zero -> 0
                          tiny / 2 + tiny / 64,
                          3 * tiny / 2,  // -> 2 * tiny (even)
                          -3 * tiny / 2,
                          tiny * 1.25,
                          std::ldexp(1.0, half ? -14 : -126) - tiny / 2,  // -> min normal
                          std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity()};
  for (double e : edges) values.push_back(static_cast<float>(e));

  Host h({static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) h.v[i] = values[i];
  const Tensor x = kiln::from_vector<float>(values, h.sizes);
  const Tensor y = x.to(d);
  ASSERT_TRUE(has_meta(y, h.sizes, d));
  EXPECT_TRUE(all_close(y, map(h, [&](double v) { return value(bits(v)); }), tol_exact()));
  // Bit patterns (sign of zero included) through a raw read of the storage.
  const Tensor yc = y.contiguous();
  const auto* p = static_cast<const uint16_t*>(yc.data_ptr());
  int64_t bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (p[i] != bits(values[i]) && bad++ < 5)
      ADD_FAILURE() << "float " << values[i] << " -> bits 0x" << std::hex << p[i] << ", expected 0x"
                    << bits(values[i]) << std::dec;
  }
  EXPECT_EQ(bad, 0);

  // NaN stays NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor n = kiln::from_vector<float>({nan, -nan}, {2}).to(d);
  for (double v : n.to_vector<double>()) EXPECT_TRUE(std::isnan(v));
}

// Scalars given to factories round the same way (0.1 is not exact in 16 bits).
TEST_P(SixteenBit, FullRoundsItsValue) {
  const DType d = GetParam();
  const double v = uniform(-1000.0, 1000.0);
  const double expected = value(bits(static_cast<float>(v)));
  EXPECT_TRUE(
      all_close(kiln::full({3}, v, d), Host({3}, {expected, expected, expected}), tol_exact()));
  const double p1 = value(bits(static_cast<float>(0.1)));
  EXPECT_TRUE(all_close(kiln::full({1}, 0.1, d), Host({1}, {p1}), tol_exact()));
}

// 16-bit arithmetic computes in float and rounds each result once: with operands in
// [1, 2), sums and products are exact in float32, so the answer is exactly the
// 16-bit rounding of the exact result.
TEST_P(SixteenBit, ArithmeticRoundsEachResultOnce) {
  const DType d = GetParam();
  const Host a = random_host({257}, d, {1.0, 2.0});
  const Host b = random_host({257}, d, {1.0, 2.0});
  const Tensor ta = make(a, d), tb = make(b, d);
  auto ref = [&](auto f) {
    return map2(a, b, [&](double x, double y) { return round_to(d, f(x, y)); });
  };
  EXPECT_TRUE(
      all_close(kiln::add(ta, tb), ref([](double x, double y) { return x + y; }), tol_exact()));
  EXPECT_TRUE(
      all_close(kiln::mul(ta, tb), ref([](double x, double y) { return x * y; }), tol_exact()));
  EXPECT_TRUE(
      all_close(kiln::sub(ta, tb), ref([](double x, double y) { return x - y; }), tol_exact()));
}

INSTANTIATE_TEST_SUITE_P(HalfAndBFloat16, SixteenBit,
                         ::testing::Values(DType::Float16, DType::BFloat16), param_name);

// Our own encoder agrees with hand-checked values (so the reference itself is tested).
TEST(ReferenceRounding, EncodersMatchKnownBitPatterns) {
  EXPECT_EQ(half_bits(1.0), 0x3c00);
  EXPECT_EQ(half_bits(-2.0), 0xc000);
  EXPECT_EQ(half_bits(65504.0), 0x7bff);
  EXPECT_EQ(half_bits(65520.0), 0x7c00);
  EXPECT_EQ(half_bits(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(half_bits(std::ldexp(1.0, -14)), 0x0400);
  EXPECT_EQ(half_bits(1.0 / 3.0), 0x3555);
  EXPECT_EQ(half_bits(0.1), 0x2e66);
  EXPECT_EQ(bf16_bits(1.0), 0x3f80);
  EXPECT_EQ(bf16_bits(-2.0), 0xc000);
  EXPECT_EQ(bf16_bits(1.0 / 3.0), 0x3eab);
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -133)), 0x0001);
  EXPECT_EQ(bf16_bits(3.0e38), 0x7f62);
  EXPECT_EQ(half_value(0x3555), 0.333251953125);
  EXPECT_EQ(bf16_value(0x3eab), 0.333984375);
}

}  // namespace
}  // namespace kt
