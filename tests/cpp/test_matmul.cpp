// matmul with PyTorch's rank rules (1-D dot, matrix-vector, vector-matrix, batched with
// broadcast batch dims), transposed/strided/expanded operands, empty and size-1 dims,
// and linear with and without bias, against double-precision loops.
#include "reference.h"

namespace kt {
namespace {

Host ref_matmul(const Host& a, const Host& b) {
  Host A = a, B = b;
  const bool vec_a = a.dim() == 1, vec_b = b.dim() == 1;
  if (vec_a) A.sizes = {1, a.sizes[0]};
  if (vec_b) B.sizes = {b.sizes[0], 1};
  const Dims batch_a(A.sizes.begin(), A.sizes.end() - 2);
  const Dims batch_b(B.sizes.begin(), B.sizes.end() - 2);
  const int64_t n = A.sizes[A.sizes.size() - 2], k = A.sizes.back(), m = B.sizes.back();
  Dims sizes = broadcast(batch_a, batch_b);
  sizes.push_back(n);
  sizes.push_back(m);
  Host out(sizes);
  int64_t flat = 0;
  for_each_index(sizes, [&](const Dims& o) {
    Dims ia = o, ib = o;
    double acc = 0;
    for (int64_t p = 0; p < k; ++p) {
      ia.back() = p;          // [batch..., i, p]
      ib[ib.size() - 2] = p;  // [batch..., p, j]
      acc += A.bat(ia) * B.bat(ib);
    }
    out.v[static_cast<size_t>(flat++)] = acc;
  });
  Dims final_sizes(sizes.begin(), sizes.end() - 2);
  if (!vec_a) final_sizes.push_back(n);
  if (!vec_b) final_sizes.push_back(m);
  out.sizes = final_sizes;
  return out;
}

Tol matmul_tol(DType d, int64_t k) {
  Tol t = tol_reduce(d);
  t.atol *= std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
  return t;
}

class Matmul : public ::testing::TestWithParam<DType> {};

TEST_P(Matmul, RankRulesBroadcastingAndLayouts) {
  const DType d = GetParam();
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{3}, {3}},          {{4}, {4, 5}},          {{3, 4}, {4}},
      {{3, 4}, {4, 5}},    {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}},
      {{4}, {2, 4, 5}},    {{2, 3, 4}, {4}},       {{1, 1}, {1, 1}},
      {{0, 4}, {4, 5}},    {{3, 0}, {0, 5}},       {{2, 3, 4}, {4, 5}},
      {{3, 4}, {2, 4, 5}}, {{65, 130}, {130, 67}}, {{128, 256}, {256, 64}},
      {{1, 7}, {7, 1}},    {{3, 1, 5}, {1, 5, 2}}, {{2, 0, 4}, {2, 4, 3}},
      {{17}, {17, 1}}};
  const std::pair<Layout, Layout> layouts[] = {{Layout::Contiguous, Layout::Contiguous},
                                               {Layout::Transposed, Layout::Transposed},
                                               {Layout::Contiguous, Layout::Transposed},
                                               {Layout::Stepped, Layout::Offset},
                                               {Layout::Permuted, Layout::Stepped}};
  for (const auto& [sa, sb] : cases) {
    const Host a = random_host(sa, d, {-1.0, 1.0});
    const Host b = random_host(sb, d, {-1.0, 1.0});
    const Host expected = ref_matmul(a, b);
    for (const auto& [la, lb] : layouts) {
      SCOPED_TRACE(dims_string(sa) + " " + name(la) + " @ " + dims_string(sb) + " " + name(lb));
      const Tensor y = kiln::matmul(make(a, d, la), make(b, d, lb));
      ASSERT_TRUE(has_meta(y, expected.sizes, d));
      EXPECT_TRUE(all_close(y, expected, matmul_tol(d, sa.back())));
    }
  }
}

TEST_P(Matmul, ExpandedAndSlicedBatches) {
  const DType d = GetParam();
  const Host a = random_host({3, 4, 6}, d, {-1.0, 1.0});
  const Host b = random_host({1, 6, 5}, d, {-1.0, 1.0});
  Host bx({3, 6, 5});
  for_each_index(bx.sizes, [&](const Dims& i) { bx.at(i) = b.bat(i); });
  const Tensor y = kiln::matmul(make(a, d), make(b, d).expand({3, 6, 5}));
  EXPECT_TRUE(all_close(y, ref_matmul(a, bx), matmul_tol(d, 6)));

  // Every other batch and a column slice of a larger matrix.
  const Host big = random_host({6, 4, 9}, d, {-1.0, 1.0});
  const Tensor tb = make(big, d).slice(0, 0, 6, 2).slice(2, 1, 7);  // [3, 4, 6]
  Host sliced({3, 4, 6});
  for_each_index(sliced.sizes, [&](const Dims& i) {
    sliced.at(i) = big.at({2 * i[0], i[1], i[2] + 1});
  });
  const Host c = random_host({3, 6, 2}, d, {-1.0, 1.0});
  EXPECT_TRUE(all_close(kiln::matmul(tb, make(c, d)), ref_matmul(sliced, c), matmul_tol(d, 6)));
}

TEST_P(Matmul, EmptyInnerDimGivesZeros) {
  const DType d = GetParam();
  const Tensor y = kiln::matmul(make(Host({3, 0}), d), make(Host({0, 4}), d));
  ASSERT_TRUE(has_meta(y, {3, 4}, d));
  EXPECT_TRUE(all_close(y, Host({3, 4}), tol_exact()));
}

INSTANTIATE_TEST_SUITE_P(Floats, Matmul, ::testing::ValuesIn(float_dtypes()), param_name);

// ---- linear: x @ weight^T + bias

Host ref_linear(const Host& x, const Host& w, const Host* bias) {
  Host out = ref_matmul(x, permute(w, {1, 0}));
  if (bias) {
    int64_t k = 0;
    for_each_index(out.sizes, [&](const Dims& i) {
      out.v[static_cast<size_t>(k++)] += bias->v[static_cast<size_t>(i.back())];
    });
  }
  return out;
}

class Linear : public ::testing::TestWithParam<DType> {};

TEST_P(Linear, WithAndWithoutBiasOnAnyLeadingShape) {
  const DType d = GetParam();
  const int64_t in = 24, out = 10;
  const Host w = random_host({out, in}, d, {-1.0, 1.0});
  const Host b = random_host({out}, d, {-1.0, 1.0});
  for (const Dims& xs : {Dims{in}, Dims{5, in}, Dims{2, 3, in}, Dims{0, in}, Dims{1, in}}) {
    const Host x = random_host(xs, d, {-1.0, 1.0});
    for (bool with_bias : {false, true}) {
      for (Layout lw : {Layout::Contiguous, Layout::Transposed}) {
        SCOPED_TRACE(dims_string(xs) + (with_bias ? " bias " : " no bias ") + name(lw));
        const Tensor tw = make(w, d, lw);  // Transposed: weight stored [in, out], viewed .t()
        const Tensor y = kiln::linear(make(x, d, Layout::Stepped), tw,
                                      with_bias ? make(b, d, Layout::Stepped) : Tensor());
        const Host expected = ref_linear(x, w, with_bias ? &b : nullptr);
        ASSERT_TRUE(has_meta(y, expected.sizes, d));
        EXPECT_TRUE(all_close(y, expected, matmul_tol(d, in)));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, Linear, ::testing::ValuesIn(float_dtypes()), param_name);

TEST(MatmulMisc, LargeFloat32ProductIsAccurate) {
  // K = 1024: accumulation must be in float32 or better, never in a 16-bit type.
  const Host a = random_host({33, 1024}, DType::Float32, {-1.0, 1.0});
  const Host b = random_host({1024, 31}, DType::Float32, {-1.0, 1.0});
  EXPECT_TRUE(all_close(kiln::matmul(make(a, DType::Float32), make(b, DType::Float32)),
                        ref_matmul(a, b), matmul_tol(DType::Float32, 1024)));
}

TEST(MatmulMisc, InputsAreNotModified) {
  const Host a = random_host({4, 5}, DType::Float32), b = random_host({5, 3}, DType::Float32);
  const Tensor ta = make(a, DType::Float32, Layout::Transposed);
  const Tensor tb = make(b, DType::Float32);
  (void)kiln::matmul(ta, tb);
  EXPECT_TRUE(all_close(ta, a, tol_exact()));
  EXPECT_TRUE(all_close(tb, b, tol_exact()));
}

}  // namespace
}  // namespace kt
