// softmax / log_softmax along every dim (stable for large inputs, -inf entries, size-1
// and empty dims, strided inputs) and layer_norm over the last one or two dims, with
// and without weight and bias, against double-precision loops.
#include <algorithm>
#include <limits>

#include "reference.h"

namespace kt {
namespace {

using Lane = std::vector<double>;

// Applies f to every 1-D lane of h along dim (same length in, same length out).
Host along(const Host& h, int64_t dim, const std::function<Lane(const Lane&)>& f) {
  dim = wrap(dim, h.dim());
  Host out(h.sizes);
  Dims outer = h.sizes;
  outer[static_cast<size_t>(dim)] = 1;
  const int64_t n = h.sizes[static_cast<size_t>(dim)];
  for_each_index(outer, [&](const Dims& o) {
    Lane lane;
    Dims i = o;
    for (int64_t k = 0; k < n; ++k) {
      i[static_cast<size_t>(dim)] = k;
      lane.push_back(h.at(i));
    }
    const Lane r = f(lane);
    for (int64_t k = 0; k < n; ++k) {
      i[static_cast<size_t>(dim)] = k;
      out.at(i) = r[static_cast<size_t>(k)];
    }
  });
  return out;
}

Lane ref_softmax(const Lane& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  Lane y;
  for (double v : x) y.push_back(std::exp(v - m) / s);
  return y;
}

Lane ref_log_softmax(const Lane& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  Lane y;
  for (double v : x) y.push_back(v - m - std::log(s));
  return y;
}

class Softmax : public ::testing::TestWithParam<DType> {};

TEST_P(Softmax, EveryDimShapesAndLayouts) {
  const DType d = GetParam();
  struct Case {
    Dims sizes;
    int64_t dim;
  };
  const Case cases[] = {{{3, 4, 5}, 0},    {{3, 4, 5}, 1},  {{3, 4, 5}, 2}, {{3, 4, 5}, -1},
                        {{3, 4, 5}, -3},   {{2, 4099}, -1}, {{4099, 2}, 0}, {{7}, 0},
                        {{5, 1}, 1},       {{1, 5}, 0},     {{0, 7}, 1},    {{7, 0}, 0},
                        {{2, 3, 1, 33}, 3}};
  for (const Case& c : cases) {
    const Host h = random_host(c.sizes, d, {-4.0, 4.0});
    const Host es = along(h, c.dim, ref_softmax);
    const Host el = along(h, c.dim, ref_log_softmax);
    for (Layout layout :
         {Layout::Contiguous, Layout::Transposed, Layout::Permuted, Layout::Stepped}) {
      SCOPED_TRACE(dims_string(c.sizes) + " dim " + std::to_string(c.dim) + " " + name(layout));
      const Tensor x = make(h, d, layout);
      const Tensor s = kiln::softmax(x, c.dim);
      const Tensor l = kiln::log_softmax(x, c.dim);
      ASSERT_TRUE(has_meta(s, c.sizes, d));
      ASSERT_TRUE(has_meta(l, c.sizes, d));
      EXPECT_TRUE(all_close(s, es, tol_pointwise(d))) << "softmax";
      EXPECT_TRUE(all_close(l, el, tol_pointwise(d))) << "log_softmax";
    }
  }
}

TEST_P(Softmax, LargeInputsDoNotOverflow) {
  const DType d = GetParam();
  // Logits far apart: 1000 for most dtypes; float16 tops out at 65504, and log_softmax
  // values (down to -2 * scale) must stay in its range.
  const double scale = d == DType::Float16 ? 20000.0 : 1000.0;
  Host h = random_host({6, 50}, d, {-scale, scale});
  for (int64_t i = 0; i < 6; ++i) h.at({i, 3}) = round_to(d, scale);  // a huge maximum
  const Tensor x = make(h, d);
  EXPECT_TRUE(all_close(kiln::softmax(x, 1), along(h, 1, ref_softmax), tol_pointwise(d)));
  EXPECT_TRUE(all_close(kiln::log_softmax(x, 1), along(h, 1, ref_log_softmax),
                        {tol_pointwise(d).rtol, tol_pointwise(d).atol * scale}));
}

TEST_P(Softmax, MinusInfinityGetsZeroProbability) {
  const DType d = GetParam();
  const double inf = std::numeric_limits<double>::infinity();
  Host h = random_host({4, 9}, d);
  for (int64_t i = 0; i < 4; ++i) h.at({i, i * 2}) = -inf;  // a causal-mask-like pattern
  const Tensor x = make(h, d);
  EXPECT_TRUE(all_close(kiln::softmax(x, -1), along(h, 1, ref_softmax), tol_pointwise(d)));
  EXPECT_TRUE(all_close(kiln::log_softmax(x, -1), along(h, 1, ref_log_softmax), tol_pointwise(d)));
}

INSTANTIATE_TEST_SUITE_P(Floats, Softmax, ::testing::ValuesIn(float_dtypes()), param_name);

// ---- layer_norm

Host ref_layer_norm(const Host& x, int64_t normalized_dims, const Host* w, const Host* b,
                    double eps) {
  const int64_t inner = numel_of(Dims(x.sizes.end() - normalized_dims, x.sizes.end()));
  const int64_t outer = inner ? x.numel() / inner : 0;
  Host out(x.sizes);
  for (int64_t o = 0; o < outer; ++o) {
    const double* p = x.v.data() + o * inner;
    double m = 0;
    for (int64_t i = 0; i < inner; ++i) m += p[i];
    m /= static_cast<double>(inner);
    double var = 0;
    for (int64_t i = 0; i < inner; ++i) var += (p[i] - m) * (p[i] - m);
    var /= static_cast<double>(inner);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < inner; ++i) {
      double y = (p[i] - m) * rstd;
      if (w) y *= w->v[static_cast<size_t>(i)];
      if (b) y += b->v[static_cast<size_t>(i)];
      out.v[static_cast<size_t>(o * inner + i)] = y;
    }
  }
  return out;
}

class LayerNorm : public ::testing::TestWithParam<DType> {};

TEST_P(LayerNorm, OverLastDimsWithOptionalAffine) {
  const DType d = GetParam();
  struct Case {
    Dims sizes;
    int64_t normalized;  // number of trailing dims
  };
  const Case cases[] = {{{4, 10}, 1},    {{2, 3, 8}, 1}, {{2, 3, 4}, 2},    {{5, 1}, 1},
                        {{64, 1000}, 1}, {{7}, 1},       {{3, 2, 2, 5}, 3}, {{0, 6}, 1}};
  enum Affine { None, WeightOnly, Both, BiasOnly };
  for (const Case& c : cases) {
    const Dims ns(c.sizes.end() - c.normalized, c.sizes.end());
    const Host x = random_host(c.sizes, d, {-3.0, 3.0});
    const Host w = random_host(ns, d, {0.5, 2.0});
    const Host b = random_host(ns, d, {-1.0, 1.0});
    for (Affine affine : {None, WeightOnly, Both, BiasOnly}) {
      for (double eps : {1e-5, 0.1}) {
        for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Stepped}) {
          SCOPED_TRACE(dims_string(c.sizes) + " normalized " + dims_string(ns) + " affine " +
                       std::to_string(affine) + " eps " + std::to_string(eps) + " " + name(layout));
          const Tensor tx = make(x, d, layout);
          const Tensor tw =
              affine == WeightOnly || affine == Both ? make(w, d, Layout::Stepped) : Tensor();
          const Tensor tb = affine == Both || affine == BiasOnly ? make(b, d) : Tensor();
          const Tensor y = kiln::layer_norm(tx, ns, tw, tb, eps);
          ASSERT_TRUE(has_meta(y, c.sizes, d));
          const Host expected = ref_layer_norm(x, c.normalized, tw.defined() ? &w : nullptr,
                                               tb.defined() ? &b : nullptr, eps);
          EXPECT_TRUE(all_close(y, expected, tol_reduce(d)));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, LayerNorm, ::testing::ValuesIn(float_dtypes()), param_name);

TEST(LayerNormMisc, LargeMeanDoesNotCancelTheVariance) {
  // Values 1000 + U[0, 1): E[x^2] - E[x]^2 in float32 would lose the variance.
  const Host x = map(random_host({8, 512}, DType::Float32, {0.0, 1.0}),
                     [](double v) { return round_to(DType::Float32, 1000.0 + v); });
  const Tensor y = kiln::layer_norm(make(x, DType::Float32), {512});
  EXPECT_TRUE(all_close(y, ref_layer_norm(x, 1, nullptr, nullptr, 1e-5), {1e-3, 1e-3}));
}

TEST(LayerNormMisc, ConstantRowsGiveTheBias) {
  const Host b = random_host({6}, DType::Float32);
  const Tensor x = kiln::full({3, 6}, 2.5, DType::Float32);
  const Tensor y = kiln::layer_norm(x, {6}, kiln::ones({6}), make(b, DType::Float32));
  Host expected({3, 6});
  for_each_index(expected.sizes,
                 [&](const Dims& i) { expected.at(i) = b.v[static_cast<size_t>(i[1])]; });
  EXPECT_TRUE(all_close(y, expected, tol_reduce(DType::Float32)));
}

}  // namespace
}  // namespace kt
