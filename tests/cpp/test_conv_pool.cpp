// conv2d (stride, padding, rectangular kernels, bias, batched and unbatched, empty batch,
// strided input and weight) and max/avg pooling (default stride = kernel, padding,
// count_include_pad semantics of PyTorch's default) against direct loops.
#include <array>
#include <limits>

#include "reference.h"

namespace kt {
namespace {

using Pair = std::array<int64_t, 2>;

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

// x: [N, C, H, W] or [C, H, W]; w: [O, C, kH, kW].
Host ref_conv2d(const Host& x, const Host& w, const Host* bias, Pair stride, Pair pad) {
  const bool batched = x.dim() == 4;
  const Host X = batched ? x : Host({1, x.sizes[0], x.sizes[1], x.sizes[2]}, x.v);
  const int64_t N = X.sizes[0], C = X.sizes[1], H = X.sizes[2], W = X.sizes[3];
  const int64_t O = w.sizes[0], KH = w.sizes[2], KW = w.sizes[3];
  const int64_t OH = out_size(H, KH, stride[0], pad[0]), OW = out_size(W, KW, stride[1], pad[1]);
  Host out({N, O, OH, OW});
  for_each_index(out.sizes, [&](const Dims& i) {
    double acc = bias ? bias->v[static_cast<size_t>(i[1])] : 0.0;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t h = i[2] * stride[0] - pad[0] + kh, ww = i[3] * stride[1] - pad[1] + kw;
          if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
          acc += X.at({i[0], c, h, ww}) * w.at({i[1], c, kh, kw});
        }
    out.at(i) = acc;
  });
  if (!batched) out.sizes = {O, OH, OW};
  return out;
}

enum class PoolKind { Max, Avg };

Host ref_pool2d(const Host& x, PoolKind kind, Pair k, Pair s, Pair p) {
  const bool batched = x.dim() == 4;
  const Host X = batched ? x : Host({1, x.sizes[0], x.sizes[1], x.sizes[2]}, x.v);
  const int64_t N = X.sizes[0], C = X.sizes[1], H = X.sizes[2], W = X.sizes[3];
  const int64_t OH = out_size(H, k[0], s[0], p[0]), OW = out_size(W, k[1], s[1], p[1]);
  Host out({N, C, OH, OW});
  for_each_index(out.sizes, [&](const Dims& i) {
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t a = 0; a < k[0]; ++a)
      for (int64_t b = 0; b < k[1]; ++b) {
        const int64_t h = i[2] * s[0] - p[0] + a, w = i[3] * s[1] - p[1] + b;
        if (h < 0 || h >= H || w < 0 || w >= W) continue;  // padding: -inf for max, 0 for avg
        mx = std::max(mx, X.at({i[0], i[1], h, w}));
        sum += X.at({i[0], i[1], h, w});
      }
    // count_include_pad=True (PyTorch's default): the divisor is the whole window.
    out.at(i) = kind == PoolKind::Max ? mx : sum / static_cast<double>(k[0] * k[1]);
  });
  if (!batched) out.sizes = {C, OH, OW};
  return out;
}

class Conv2d : public ::testing::TestWithParam<DType> {};

TEST_P(Conv2d, StridePaddingKernelsBiasAndLayouts) {
  const DType d = GetParam();
  struct Case {
    Dims x;
    int64_t out_channels;
    Pair kernel, stride, padding;
  };
  const Case cases[] = {
      {{2, 3, 8, 8}, 4, {3, 3}, {1, 1}, {1, 1}}, {{1, 1, 5, 5}, 1, {1, 1}, {1, 1}, {0, 0}},
      {{2, 3, 9, 7}, 5, {3, 3}, {2, 2}, {0, 0}}, {{2, 2, 7, 9}, 3, {2, 3}, {2, 1}, {1, 0}},
      {{1, 4, 3, 3}, 2, {5, 5}, {1, 1}, {2, 2}}, {{0, 3, 5, 5}, 2, {3, 3}, {1, 1}, {0, 0}},
      {{3, 8, 8}, 2, {3, 3}, {1, 1}, {1, 1}},    {{1, 16, 14, 14}, 8, {3, 3}, {1, 1}, {1, 1}},
      {{2, 1, 1, 1}, 3, {1, 1}, {1, 1}, {0, 0}}};
  for (const Case& c : cases) {
    const int64_t channels = c.x[c.x.size() - 3];
    const Host x = random_host(c.x, d, {-1.0, 1.0});
    const Host w =
        random_host({c.out_channels, channels, c.kernel[0], c.kernel[1]}, d, {-1.0, 1.0});
    const Host b = random_host({c.out_channels}, d, {-1.0, 1.0});
    Tol tol = tol_reduce(d);
    tol.atol *= std::sqrt(static_cast<double>(channels * c.kernel[0] * c.kernel[1]));
    for (bool with_bias : {false, true}) {
      const Host expected = ref_conv2d(x, w, with_bias ? &b : nullptr, c.stride, c.padding);
      for (Layout layout : {Layout::Contiguous, Layout::Permuted}) {
        SCOPED_TRACE(dims_string(c.x) + " kernel " + dims_string({c.kernel[0], c.kernel[1]}) +
                     " stride " + dims_string({c.stride[0], c.stride[1]}) + " padding " +
                     dims_string({c.padding[0], c.padding[1]}) + (with_bias ? " bias " : " ") +
                     name(layout));
        const Tensor y =
            kiln::conv2d(make(x, d, layout), make(w, d, layout),
                         with_bias ? make(b, d, Layout::Stepped) : Tensor(), c.stride, c.padding);
        ASSERT_TRUE(has_meta(y, expected.sizes, d));
        EXPECT_TRUE(all_close(y, expected, tol));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, Conv2d, ::testing::ValuesIn(float_dtypes()), param_name);

class Pool2d : public ::testing::TestWithParam<DType> {};

TEST_P(Pool2d, MaxAndAvgWithStridesAndPadding) {
  const DType d = GetParam();
  struct Case {
    Dims x;
    Pair kernel, stride, padding;  // stride {0, 0}: the kernel
  };
  const Case cases[] = {
      {{2, 3, 8, 8}, {2, 2}, {0, 0}, {0, 0}}, {{1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}},
      {{2, 1, 6, 9}, {2, 3}, {1, 2}, {1, 1}}, {{3, 5, 5}, {2, 2}, {1, 1}, {0, 0}},
      {{1, 1, 4, 4}, {4, 4}, {0, 0}, {0, 0}}, {{1, 1, 5, 5}, {2, 2}, {0, 0}, {0, 0}},
      {{0, 2, 4, 4}, {2, 2}, {0, 0}, {0, 0}}, {{2, 4, 33, 17}, {3, 2}, {2, 3}, {1, 1}}};
  for (const Case& c : cases) {
    const Host x = random_host(c.x, d, {-4.0, 4.0});
    const Pair s = c.stride[0] == 0 ? c.kernel : c.stride;
    for (Layout layout : {Layout::Contiguous, Layout::Permuted, Layout::Stepped}) {
      SCOPED_TRACE(dims_string(c.x) + " kernel " + dims_string({c.kernel[0], c.kernel[1]}) +
                   " stride " + dims_string({s[0], s[1]}) + " padding " +
                   dims_string({c.padding[0], c.padding[1]}) + " " + name(layout));
      const Tensor tx = make(x, d, layout);
      const Host emax = ref_pool2d(x, PoolKind::Max, c.kernel, s, c.padding);
      const Host eavg = ref_pool2d(x, PoolKind::Avg, c.kernel, s, c.padding);
      const Tensor ymax = kiln::max_pool2d(tx, c.kernel, c.stride, c.padding);
      const Tensor yavg = kiln::avg_pool2d(tx, c.kernel, c.stride, c.padding);
      ASSERT_TRUE(has_meta(ymax, emax.sizes, d));
      ASSERT_TRUE(has_meta(yavg, eavg.sizes, d));
      EXPECT_TRUE(all_close(ymax, emax, tol_exact())) << "max_pool2d";
      EXPECT_TRUE(all_close(yavg, eavg, tol_pointwise(d))) << "avg_pool2d";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, Pool2d, ::testing::ValuesIn(float_dtypes()), param_name);

}  // namespace
}  // namespace kt
