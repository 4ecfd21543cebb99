// The ops along one dim against double references written here, on fresh random
// inputs for every dtype: gather, scatter (src and value), scatter_add, index_add
// (repeated indices, strided inputs), argsort / sort / topk (stable order, NaN the
// largest, descending), cumsum / cumprod / prod (keepdim, int -> int64, empty dims), and
// each inside a traced loop (more iterations than the warmup) equal to eager.
#include <algorithm>
#include <numeric>

#include "reference.h"
#include "run_modes.h"

namespace kt {
namespace {

Tensor i64(const std::vector<int64_t>& v, const Dims& sizes) {
  return kiln::from_vector<int64_t>(v, sizes);
}

// Random indices in [0, limit) of the given shape.
std::vector<int64_t> random_index(const Dims& sizes, int64_t limit) {
  std::vector<int64_t> v(static_cast<size_t>(numel_of(sizes)));
  for (auto& e : v) e = uniform_int(0, limit - 1);
  return v;
}

Host ref_gather(const Host& x, int64_t dim, const std::vector<int64_t>& index, const Dims& shape) {
  Host out(shape);
  for_each_index(shape, [&](const Dims& i) {
    Dims j = i;
    j[static_cast<size_t>(dim)] = index[static_cast<size_t>(ravel(i, shape))];
    out.at(i) = x.at(j);
  });
  return out;
}

// mode 0: scatter (last write wins), 1: scatter_add.
Host ref_scatter(const Host& x, int64_t dim, const std::vector<int64_t>& index, const Dims& shape,
                 const Host& src, int mode) {
  Host out = x;
  for_each_index(shape, [&](const Dims& i) {
    Dims j = i;
    j[static_cast<size_t>(dim)] = index[static_cast<size_t>(ravel(i, shape))];
    out.at(j) = mode == 0 ? src.at(i) : out.at(j) + src.at(i);
  });
  return out;
}

class AlongDim : public ::testing::TestWithParam<DType> {};

TEST_P(AlongDim, GatherMatchesTheReferenceOnStridedInputs) {
  const DType d = GetParam();
  const Host x = random_host({4, 5, 3}, d);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Dims shape = {3, 4, 2};
    shape[static_cast<size_t>(dim)] = 6;  // longer than x along dim: repeats
    const auto index = random_index(shape, x.sizes[static_cast<size_t>(dim)]);
    const Tensor xt = make(x, d, Layout::Transposed);
    EXPECT_TRUE(all_close(kiln::gather(xt, dim - 3, i64(index, shape)),
                          ref_gather(x, dim, index, shape), tol_exact()))
        << "dim " << dim;
  }
}

TEST_P(AlongDim, ScatterAndScatterAddMatchTheReference) {
  const DType d = GetParam();
  const Host x = random_host({4, 5}, d);
  const Dims shape = {3, 5};
  const Host src = random_host({4, 6}, d);  // larger than index: only its corner is read
  // scatter: distinct indices per column (a permutation's first rows), so no write races.
  std::vector<int64_t> index(15);
  for (int64_t c = 0; c < 5; ++c) {
    std::vector<int64_t> perm(4);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng());
    for (int64_t r = 0; r < 3; ++r) index[static_cast<size_t>(r * 5 + c)] = perm[r];
  }
  Host src_corner(shape);
  for_each_index(shape, [&](const Dims& i) { src_corner.at(i) = src.at(i); });
  EXPECT_TRUE(all_close(kiln::scatter(make(x, d), 0, i64(index, shape), make(src, d)),
                        ref_scatter(x, 0, index, shape, src_corner, 0), tol_exact()));
  const Tensor value_result = kiln::scatter(make(x, d), 0, i64(index, shape), kiln::Scalar(1));
  EXPECT_TRUE(all_close(
      value_result, ref_scatter(x, 0, index, shape, Host(shape, std::vector<double>(15, 1.0)), 0),
      tol_exact()));
  if (d == DType::Bool) return;
  const auto repeated = random_index(shape, 4);
  const Host expected = rounded(ref_scatter(x, 0, repeated, shape, src_corner, 1), d);
  EXPECT_TRUE(all_close(kiln::scatter_add(make(x, d), 0, i64(repeated, shape), make(src, d)),
                        expected, is_float(d) ? tol_pointwise(d) : tol_exact()));
}

TEST_P(AlongDim, IndexAddMatchesTheReference) {
  const DType d = GetParam();
  if (d == DType::Bool) GTEST_SKIP() << "index_add rejects bool";
  const Host x = random_host({3, 4, 2}, d), src = random_host({3, 6, 2}, d);
  const auto index = random_index({6}, 4);
  Host expected = x;
  for_each_index(src.sizes, [&](const Dims& i) {
    Dims j = i;
    j[1] = index[static_cast<size_t>(i[1])];
    expected.at(j) += 2 * src.at(i);
  });
  // Up to 6 terms land on one element, each sum rounded to d: in bfloat16 a partial sum
  // of up to ~16 is off by up to half an ulp (1/32) per add, so cancellation to near 0
  // leaves an absolute error that no relative tolerance covers (0.0117 seen on one seed).
  Tol tol = is_float(d) ? tol_reduce(d) : tol_exact();
  if (d == DType::BFloat16) tol.atol = 6 * (16.0 / 256) / 2;
  if (d == DType::Float16) tol.atol = 6 * (16.0 / 2048) / 2;
  EXPECT_TRUE(all_close(kiln::index_add(make(x, d), 1, i64(index, {6}), make(src, d), 2),
                        rounded(expected, d), tol));
}

// The stable order of a line, NaN the largest.
std::vector<int64_t> ref_order(const std::vector<double>& line, bool descending) {
  std::vector<int64_t> order(line.size());
  std::iota(order.begin(), order.end(), 0);
  auto less = [](double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double va = line[static_cast<size_t>(a)], vb = line[static_cast<size_t>(b)];
    return descending ? less(vb, va) : less(va, vb);
  });
  return order;
}

TEST_P(AlongDim, SortArgsortAndTopkFollowTheStableOrder) {
  const DType d = GetParam();
  Range r;
  r.ilo = -3;
  r.ihi = 3;  // many ties
  Host x = random_host({3, 7, 2}, d, r);
  if (is_float(d)) x.v[4] = NAN, x.v[9] = NAN;
  const Tensor xt = make(x, d, Layout::Permuted);
  for (bool descending : {false, true}) {
    const auto sorted = kiln::sort(xt, 1, descending, true);
    const auto top = kiln::topk(xt, 3, 1, descending);
    Host want_idx({3, 7, 2}), want_val({3, 7, 2}), top_idx({3, 3, 2});
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t c = 0; c < 2; ++c) {
        std::vector<double> line(7);
        for (int64_t i = 0; i < 7; ++i) line[static_cast<size_t>(i)] = x.at({o, i, c});
        const auto order = ref_order(line, descending);
        for (int64_t i = 0; i < 7; ++i) {
          want_idx.at({o, i, c}) = static_cast<double>(order[static_cast<size_t>(i)]);
          want_val.at({o, i, c}) = line[static_cast<size_t>(order[static_cast<size_t>(i)])];
          if (i < 3) top_idx.at({o, i, c}) = want_idx.at({o, i, c});
        }
      }
    EXPECT_TRUE(all_close(sorted.indices, want_idx, tol_exact())) << descending;
    EXPECT_TRUE(all_close(sorted.values, want_val, tol_exact())) << descending;
    EXPECT_TRUE(all_close(kiln::argsort(xt, -2, descending), want_idx, tol_exact()));
    EXPECT_TRUE(all_close(top.indices, top_idx, tol_exact())) << descending;
    EXPECT_TRUE(has_meta(top.values, {3, 3, 2}, d));
  }
}

TEST_P(AlongDim, CumsumCumprodAndProdMatchTheReference) {
  const DType d = GetParam();
  Range r;
  r.lo = -1.5, r.hi = 1.5, r.ilo = -3, r.ihi = 3;
  const Host x = random_host({3, 4, 5}, d, r);
  const DType out = is_float(d) ? d : DType::Int64;
  const Tol tol = is_float(d) ? tol_reduce(d) : tol_exact();
  for (int64_t dim = 0; dim < 3; ++dim) {
    Host sum = x, prod = x;
    Dims total_sizes = x.sizes;
    total_sizes[static_cast<size_t>(dim)] = 1;
    Host total(total_sizes);
    for_each_index(total_sizes, [&](const Dims& i) {
      double s = 0, p = 1;
      Dims j = i;
      for (int64_t k = 0; k < x.sizes[static_cast<size_t>(dim)]; ++k) {
        j[static_cast<size_t>(dim)] = k;
        s += x.at(j);
        p *= x.at(j);
        sum.at(j) = s;
        prod.at(j) = p;
      }
      total.at(i) = p;
    });
    const Tensor xt = make(x, d, Layout::Stepped);
    EXPECT_TRUE(all_close(kiln::cumsum(xt, dim), rounded(sum, out), tol)) << "dim " << dim;
    EXPECT_TRUE(all_close(kiln::cumprod(xt, dim), rounded(prod, out), tol)) << "dim " << dim;
    EXPECT_TRUE(all_close(kiln::prod(xt, dim, true), rounded(total, out), tol)) << "dim " << dim;
    EXPECT_TRUE(has_meta(kiln::prod(xt, dim), kiln::prod(xt, dim, true).squeeze(dim).sizes(), out));
  }
  double all = 1;  // of the first row's 20 elements (integers stay far below 2^53)
  for (int64_t i = 0; i < 20; ++i) all *= x.v[static_cast<size_t>(i)];
  EXPECT_TRUE(all_close(kiln::prod(make(x, d).select(0, 0)), rounded(Host({}, {all}), out), tol));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AlongDim, ::testing::ValuesIn(all_dtypes()), param_name);

TEST(AlongDimEdges, EmptyAndZeroDimInputs) {
  EXPECT_TRUE(has_meta(kiln::cumsum(kiln::zeros({0, 3}), 0), {0, 3}, DType::Float32));
  EXPECT_TRUE(all_close(kiln::prod(kiln::zeros({0, 3}), 0), Host({3}, {1, 1, 1}), tol_exact()));
  EXPECT_TRUE(all_close(kiln::sort(kiln::full({}, 2.0)).values, Host({}, {2}), tol_exact()));
  EXPECT_TRUE(has_meta(kiln::topk(kiln::zeros({4}), 0).indices, {0}, DType::Int64));
  // PyTorch's topk of a 0-dim input is that input, index 0, for k = 0 too.
  EXPECT_TRUE(all_close(kiln::topk(kiln::full({}, 5.0), 0).values, Host({}, {5}), tol_exact()));
  EXPECT_TRUE(all_close(kiln::topk(kiln::full({}, 5.0), 0).indices, Host({}, {0}), tol_exact()));
  EXPECT_TRUE(
      has_meta(kiln::gather(kiln::zeros({3, 2}), 0, i64({}, {0, 2})), {0, 2}, DType::Float32));
  // A bad index throws before anything is written.
  EXPECT_TRUE(throws<kiln::IndexError>(
      [] {
        kiln::scatter_add(kiln::zeros({3, 2}), 0, i64({5}, {1, 1}), kiln::ones({1, 1}));
      },
      {"[scatter_add] index 5"}));
}

// Each op inside a loop that runs past the warmup: traced replays equal eager results.
TEST(AlongDimTraced, LoopsGiveTheEagerResults) {
  const Host x = random_host({4, 6}, DType::Float32);
  const auto index = random_index({4, 3}, 4);
  auto step = [&](const Tensor& a) {
    const Tensor idx = i64(index, {4, 3});
    const Tensor g = kiln::gather(a, 1, idx) * 2.0;
    const Tensor s = kiln::scatter_add(a, 1, idx, g);
    const auto top = kiln::topk(s, 2, 1);
    const Tensor c = kiln::cumsum(s, 0) + kiln::prod(a, 1, true) + kiln::cumprod(a, 1);
    return kiln::cat({top.values, kiln::sort(c, 1).values,
                      kiln::index_add(a, 0, idx.select(1, 0), a).narrow(1, 0, 2),
                      top.indices.to(DType::Float32)},
                     1);
  };
  Host eager;
  {
    RunModeScope scope(RunMode::Eager);
    eager = read(step(make(x, DType::Float32)));
  }
  for (RunMode mode : {RunMode::Interpreted, RunMode::Jit}) {
    RunModeScope scope(mode);
    for (int i = 0; i < 6; ++i) {
      const Tensor a = make(x, DType::Float32);
      EXPECT_TRUE(all_close(step(a), eager, tol_reduce(DType::Float32)))
          << mode_name(mode) << " iteration " << i;
    }
  }
}

}  // namespace
}  // namespace kt

namespace kt {
namespace {

// Multinomial: the empirical frequencies of many draws match the probabilities (a loose
// chi-square bound), draws without replacement are distinct and never pick p == 0, and
// the same seed gives the same draws.
TEST(Multinomial, FrequenciesFollowTheProbabilities) {
  const std::vector<double> p = {0.1, 0.0, 0.4, 0.2, 0.3};
  const Tensor probs = kiln::from_vector<double>(p, {5}).to(DType::Float32) * 7.0;
  const int64_t draws = 20000;
  const Host got = read(kiln::multinomial(probs, draws, true));
  std::vector<double> count(5, 0.0);
  for (double v : got.v) count[static_cast<size_t>(v)] += 1;
  EXPECT_EQ(count[1], 0.0);
  double chi2 = 0;
  for (size_t i = 0; i < 5; ++i)
    if (p[i] > 0) chi2 += std::pow(count[i] - draws * p[i], 2) / (draws * p[i]);
  EXPECT_LT(chi2, 30.0) << "3 degrees of freedom; 30 is far beyond any plausible value";
}

TEST(Multinomial, WithoutReplacementDrawsDistinctPositiveCategories) {
  Host p = random_host({6, 9}, DType::Float32, Range{0.1, 2.0});
  for (int64_t r = 0; r < 6; ++r) p.at({r, r}) = 0.0;
  const Tensor probs = make(p, DType::Float32);
  const Host got = read(kiln::multinomial(probs, 8));
  for (int64_t r = 0; r < 6; ++r) {
    std::vector<double> row(got.v.begin() + r * 8, got.v.begin() + (r + 1) * 8);
    std::sort(row.begin(), row.end());
    EXPECT_EQ(std::unique(row.begin(), row.end()), row.end()) << "row " << r;
    EXPECT_EQ(std::count(row.begin(), row.end(), static_cast<double>(r)), 0) << "row " << r;
  }
  // The first draw without replacement is a weighted draw: frequencies of draw 0.
  const Tensor one = kiln::from_vector<double>({1.0, 3.0}, {2});
  double ones = 0;
  const Host firsts = read(kiln::multinomial(one.view({1, 2}).expand({4000, 2}), 2).select(1, 0));
  for (double v : firsts.v) ones += v;
  EXPECT_NEAR(ones / 4000, 0.75, 0.05);
}

TEST(Multinomial, SameStateSameDraws) {
  const Tensor probs = kiln::rand({3, 10});
  kiln::manual_seed(7);
  const Host a = read(kiln::multinomial(probs, 4));
  kiln::manual_seed(7);
  EXPECT_TRUE(all_close(kiln::multinomial(probs, 4), a, tol_exact()));
  EXPECT_TRUE(
      all_close(kiln::multinomial(probs, 4, false, kiln::RandomState{7, 0}), a, tol_exact()));
}

TEST(Nonzero, CoordinatesAndMaskedSelectMatchTheReference) {
  Host x = random_host({3, 4, 2}, DType::Float32);
  for (size_t i = 0; i < x.v.size(); i += 3) x.v[i] = 0.0;
  const Tensor xt = make(x, DType::Float32, Layout::Transposed);
  std::vector<double> coords, selected;
  for_each_index(x.sizes, [&](const Dims& i) {
    if (x.at(i) == 0.0) return;
    coords.insert(coords.end(), i.begin(), i.end());
    selected.push_back(x.at(i));
  });
  const int64_t n = static_cast<int64_t>(selected.size());
  EXPECT_TRUE(all_close(kiln::nonzero(xt), Host({n, 3}, coords), tol_exact()));
  EXPECT_TRUE(all_close(kiln::masked_select(xt, xt != 0.0), Host({n}, selected), tol_exact()));
  // The mask broadcasts against x.
  const Tensor mask = kiln::from_vector<bool>({true, false}, {2});
  EXPECT_TRUE(has_meta(kiln::masked_select(xt, mask), {12}, DType::Float32));
}

// nonzero in a traced loop: a graph break each time, and the results stay right when the
// count changes from one iteration to the next.
TEST(Nonzero, TracedLoopWithChangingCountsEqualsEager) {
  RunModeScope scope(RunMode::Interpreted);
  for (int i = 0; i < 8; ++i) {
    Host x = random_host({5, 4}, DType::Float32);
    const Tensor xt = make(x, DType::Float32);
    const Tensor y = xt * 2.0;                              // traced
    const Tensor picked = kiln::masked_select(y, y > 0.5);  // the break
    const Tensor z = picked * 3.0 + 1.0;                    // traced again
    std::vector<double> want;
    for (double v : x.v)
      if (v * 2.0 > 0.5) want.push_back(v * 6.0 + 1.0);
    const int64_t n = static_cast<int64_t>(want.size());
    EXPECT_TRUE(all_close(z, Host({n}, want), tol_pointwise(DType::Float32))) << "iteration " << i;
  }
  bool named = false;
  for (const auto& b : kiln::tracer::explain().breaks)
    named = named || (b.kind == "DataDependentShape" &&
                      b.reason.find("masked_select's output shape depends on its input's "
                                    "values") != std::string::npos);
  EXPECT_TRUE(named) << kiln::tracer::explain().table();
}

}  // namespace
}  // namespace kt
