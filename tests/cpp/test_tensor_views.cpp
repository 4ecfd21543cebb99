// Views: view/reshape/transpose/permute/slice/narrow/select/expand/squeeze/unsqueeze/
// flatten/contiguous. Checks sizes, strides, storage offsets, whether storage is
// shared or copied, and the values against host-side index arithmetic.
#include <algorithm>
#include <sstream>

#include "reference.h"

namespace kt {
namespace {

// ---- host-side view semantics (PyTorch's), written independently of kiln

struct SliceBounds {
  int64_t start, length;
};
SliceBounds slice_bounds(int64_t size, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, 0, size);
  if (end < start) end = start;
  return {start, (end - start + step - 1) / step};
}

Host h_slice(const Host& h, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap(dim, h.dim());
  const SliceBounds b = slice_bounds(h.sizes[static_cast<size_t>(dim)], start, end, step);
  Dims sizes = h.sizes;
  sizes[static_cast<size_t>(dim)] = b.length;
  Host out(sizes);
  int64_t k = 0;
  for_each_index(sizes, [&](const Dims& i) {
    Dims j = i;
    j[static_cast<size_t>(dim)] = b.start + i[static_cast<size_t>(dim)] * step;
    out.v[static_cast<size_t>(k++)] = h.at(j);
  });
  return out;
}

Host h_select(const Host& h, int64_t dim, int64_t index) {
  dim = wrap(dim, h.dim());
  if (index < 0) index += h.sizes[static_cast<size_t>(dim)];
  Dims sizes = h.sizes;
  sizes.erase(sizes.begin() + dim);
  Host out(sizes);
  int64_t k = 0;
  for_each_index(sizes, [&](const Dims& i) {
    Dims j = i;
    j.insert(j.begin() + dim, index);
    out.v[static_cast<size_t>(k++)] = h.at(j);
  });
  return out;
}

Host h_expand(const Host& h, const Dims& sizes) {
  Dims out_sizes = sizes;
  const size_t lead = sizes.size() - h.sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (out_sizes[i] == -1) out_sizes[i] = h.sizes[i - lead];
  }
  Host out(out_sizes);
  int64_t k = 0;
  for_each_index(out_sizes, [&](const Dims& i) { out.v[static_cast<size_t>(k++)] = h.bat(i); });
  return out;
}

Host h_reshape(const Host& h, const Dims& sizes) { return Host(sizes, h.v); }

Dims swapped(int64_t rank, int64_t a, int64_t b) {
  Dims order;
  for (int64_t i = 0; i < rank; ++i) order.push_back(i);
  std::swap(order[static_cast<size_t>(wrap(a, rank))], order[static_cast<size_t>(wrap(b, rank))]);
  return order;
}

::testing::AssertionResult same_storage(const Tensor& a, const Tensor& b) {
  if (a.storage() == b.storage()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the tensors do not share storage";
}

class Views : public ::testing::TestWithParam<DType> {
 protected:
  DType d() const { return GetParam(); }
  Host rand(const Dims& s) const { return random_host(s, d(), {-100.0, 100.0, -1000, 1000}); }
};

TEST_P(Views, ViewSharesStorageWithRowMajorStrides) {
  const Host h = rand({2, 3, 4});
  const Tensor x = make(h, d());
  ASSERT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.strides(), (Dims{12, 4, 1}));

  const Tensor v = x.view({6, 4});
  EXPECT_TRUE(same_storage(x, v));
  EXPECT_EQ(v.strides(), (Dims{4, 1}));
  EXPECT_EQ(v.storage_offset(), 0);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_TRUE(all_close(v, h_reshape(h, {6, 4}), tol_exact()));

  const Tensor w = x.view({4, -1, 3});
  EXPECT_EQ(w.sizes(), (Dims{4, 2, 3}));
  EXPECT_TRUE(all_close(w, h_reshape(h, {4, 2, 3}), tol_exact()));
  EXPECT_TRUE(all_close(x.view({-1}), h_reshape(h, {24}), tol_exact()));
  EXPECT_EQ(x.dtype(), d());
  EXPECT_EQ(v.dtype(), d());
}

TEST_P(Views, TransposeAndPermuteReorderStrides) {
  const Host h = rand({2, 3, 4});
  const Tensor x = make(h, d());

  const Tensor t = x.transpose(0, 2);
  EXPECT_TRUE(same_storage(x, t));
  EXPECT_EQ(t.sizes(), (Dims{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Dims{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(all_close(t, permute(h, {2, 1, 0}), tol_exact()));

  const Tensor tn = x.transpose(-1, -3);  // negative dims
  EXPECT_EQ(tn.strides(), (Dims{1, 4, 12}));

  const Tensor p = x.permute({1, 2, 0});
  EXPECT_TRUE(same_storage(x, p));
  EXPECT_EQ(p.sizes(), (Dims{3, 4, 2}));
  EXPECT_EQ(p.strides(), (Dims{4, 1, 12}));
  EXPECT_TRUE(all_close(p, permute(h, {1, 2, 0}), tol_exact()));

  const Tensor pn = x.permute({-1, 0, -2});
  EXPECT_TRUE(all_close(pn, permute(h, {2, 0, 1}), tol_exact()));

  // Permuting back gives the original layout.
  const Tensor back = p.permute({2, 0, 1});
  EXPECT_EQ(back.strides(), x.strides());
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_TRUE(all_close(back, h, tol_exact()));

  const Host m = rand({3, 5});
  const Tensor mt = make(m, d()).t();
  EXPECT_EQ(mt.sizes(), (Dims{5, 3}));
  EXPECT_EQ(mt.strides(), (Dims{1, 5}));
  EXPECT_TRUE(all_close(mt, permute(m, {1, 0}), tol_exact()));

  const Host v = rand({7});
  const Tensor vt = make(v, d()).t();  // no-op for 1-D
  EXPECT_EQ(vt.sizes(), (Dims{7}));
  EXPECT_TRUE(all_close(vt, v, tol_exact()));
}

TEST_P(Views, SliceWithStepsOffsetsAndClamping) {
  const Host h = rand({7, 10});
  const Tensor x = make(h, d());
  struct Case {
    int64_t dim, start, end, step;
  };
  const Case cases[] = {{1, 0, 10, 1}, {1, 1, 10, 3},   {1, -4, 10, 2}, {0, 2, 100, 2},
                        {1, 5, 5, 1},  {0, -100, 3, 1}, {1, 8, 3, 1},   {-1, 2, -1, 4},
                        {0, 6, 7, 5},  {1, 0, 10, 10},  {-2, 1, 7, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "slice(" << c.dim << ", " << c.start << ", " << c.end << ", " << c.step << ")");
    const Tensor s = x.slice(c.dim, c.start, c.end, c.step);
    const int64_t dim = wrap(c.dim, 2);
    const SliceBounds b = slice_bounds(h.sizes[static_cast<size_t>(dim)], c.start, c.end, c.step);
    EXPECT_TRUE(same_storage(x, s));
    EXPECT_EQ(s.size(dim), b.length);
    EXPECT_EQ(s.stride(dim), x.stride(dim) * c.step);
    EXPECT_EQ(s.stride(1 - dim), x.stride(1 - dim));
    if (b.length > 0) {
      EXPECT_EQ(s.storage_offset(), b.start * x.stride(dim));
    }
    EXPECT_TRUE(all_close(s, h_slice(h, c.dim, c.start, c.end, c.step), tol_exact()));
  }
  // A slice of a slice composes offsets and steps: columns 1, 3, 5, 7, 9 then 3, 7.
  const Tensor ss = x.slice(1, 1, 10, 2).slice(1, 1, 5, 2);
  EXPECT_EQ(ss.storage_offset(), 3);
  EXPECT_EQ(ss.stride(1), 4);
  EXPECT_TRUE(all_close(ss, h_slice(h_slice(h, 1, 1, 10, 2), 1, 1, 5, 2), tol_exact()));
}

TEST_P(Views, NarrowAndSelect) {
  const Host h = rand({4, 5, 6});
  const Tensor x = make(h, d());

  const Tensor n = x.narrow(1, 2, 3);
  EXPECT_TRUE(same_storage(x, n));
  EXPECT_EQ(n.sizes(), (Dims{4, 3, 6}));
  EXPECT_EQ(n.strides(), x.strides());
  EXPECT_EQ(n.storage_offset(), 2 * 6);
  EXPECT_TRUE(all_close(n, h_slice(h, 1, 2, 5, 1), tol_exact()));
  EXPECT_TRUE(all_close(x.narrow(-1, 5, 1), h_slice(h, 2, 5, 6, 1), tol_exact()));
  EXPECT_EQ(x.narrow(0, 4, 0).numel(), 0);

  for (int64_t dim = -3; dim < 3; ++dim) {
    const int64_t size = h.sizes[static_cast<size_t>(wrap(dim, 3))];
    for (int64_t index : {int64_t{0}, size - 1, int64_t{-1}, -size}) {
      SCOPED_TRACE(::testing::Message() << "select(" << dim << ", " << index << ")");
      const Tensor s = x.select(dim, index);
      EXPECT_TRUE(same_storage(x, s));
      EXPECT_EQ(s.dim(), 2);
      const int64_t wrapped = index < 0 ? index + size : index;
      EXPECT_EQ(s.storage_offset(), wrapped * x.stride(dim));
      EXPECT_TRUE(all_close(s, h_select(h, dim, index), tol_exact()));
    }
  }
  // Selecting down to a 0-dim tensor.
  const Tensor e = x.select(0, 3).select(0, 1).select(0, 4);
  EXPECT_EQ(e.dim(), 0);
  EXPECT_EQ(e.numel(), 1);
  EXPECT_EQ(e.item().to_double(), h.at({3, 1, 4}));
}

TEST_P(Views, ExpandBroadcastsWithZeroStrides) {
  const Host h = rand({3, 1});
  const Tensor x = make(h, d());
  const Tensor e = x.expand({2, 3, 4});
  EXPECT_TRUE(same_storage(x, e));
  EXPECT_EQ(e.sizes(), (Dims{2, 3, 4}));
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.stride(1), 1);
  EXPECT_EQ(e.stride(2), 0);
  EXPECT_FALSE(e.is_contiguous());
  EXPECT_TRUE(all_close(e, h_expand(h, {2, 3, 4}), tol_exact()));

  const Tensor k = x.expand({-1, 5});
  EXPECT_EQ(k.sizes(), (Dims{3, 5}));
  EXPECT_TRUE(all_close(k, h_expand(h, {3, 5}), tol_exact()));

  const Tensor same = x.expand({3, 1});
  EXPECT_EQ(same.sizes(), (Dims{3, 1}));

  // Materializing an expanded tensor copies into fresh contiguous storage.
  const Tensor c = e.contiguous();
  EXPECT_FALSE(same_storage(x, c));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), (Dims{12, 4, 1}));
  EXPECT_TRUE(all_close(c, h_expand(h, {2, 3, 4}), tol_exact()));

  // A 0-dim tensor expands to anything.
  const Host s = rand({});
  EXPECT_TRUE(all_close(make(s, d()).expand({2, 2}), h_expand(s, {2, 2}), tol_exact()));
}

TEST_P(Views, SqueezeAndUnsqueeze) {
  const Host h = rand({1, 3, 1, 2});
  const Tensor x = make(h, d());
  auto check = [&](const Tensor& t, const Dims& sizes) {
    EXPECT_TRUE(same_storage(x, t));
    EXPECT_TRUE(all_close(t, h_reshape(h, sizes), tol_exact()));
  };
  check(x.squeeze(), {3, 2});
  check(x.squeeze(0), {3, 1, 2});
  check(x.squeeze(1), {1, 3, 1, 2});  // not size 1: unchanged
  check(x.squeeze(-2), {1, 3, 2});
  check(x.unsqueeze(0), {1, 1, 3, 1, 2});
  check(x.unsqueeze(-1), {1, 3, 1, 2, 1});
  check(x.unsqueeze(4), {1, 3, 1, 2, 1});
  check(x.unsqueeze(2), {1, 3, 1, 1, 2});

  // unsqueeze on a transposed tensor keeps the other strides.
  const Host m = rand({3, 4});
  const Tensor mt = make(m, d()).t();  // [4, 3] strides [1, 4]
  const Tensor u = mt.unsqueeze(1);
  EXPECT_EQ(u.sizes(), (Dims{4, 1, 3}));
  EXPECT_EQ(u.stride(0), 1);
  EXPECT_EQ(u.stride(2), 4);
  EXPECT_TRUE(all_close(u, h_reshape(permute(m, {1, 0}), {4, 1, 3}), tol_exact()));
  EXPECT_TRUE(all_close(u.squeeze(1), permute(m, {1, 0}), tol_exact()));

  // 0-dim <-> 1-element tensors.
  const Host s = rand({});
  const Tensor st = make(s, d());
  EXPECT_EQ(st.unsqueeze(0).sizes(), (Dims{1}));
  EXPECT_EQ(st.unsqueeze(0).squeeze().dim(), 0);
}

TEST_P(Views, FlattenAndReshapeViewWhenPossibleElseCopy) {
  const Host h = rand({2, 3, 4});
  const Tensor x = make(h, d());

  const Tensor f = x.flatten();
  EXPECT_TRUE(same_storage(x, f));
  EXPECT_TRUE(all_close(f, h_reshape(h, {24}), tol_exact()));
  EXPECT_TRUE(all_close(x.flatten(1), h_reshape(h, {2, 12}), tol_exact()));
  EXPECT_TRUE(all_close(x.flatten(0, 1), h_reshape(h, {6, 4}), tol_exact()));
  EXPECT_TRUE(all_close(x.flatten(-2, -1), h_reshape(h, {2, 12}), tol_exact()));

  const Tensor r = x.reshape({3, -1});
  EXPECT_TRUE(same_storage(x, r));
  EXPECT_TRUE(all_close(r, h_reshape(h, {3, 8}), tol_exact()));

  // Transposed: flatten/reshape must copy, in the transposed element order.
  const Tensor t = x.transpose(0, 2);  // [4, 3, 2]
  const Host th = permute(h, {2, 1, 0});
  const Tensor tf = t.flatten();
  EXPECT_FALSE(same_storage(x, tf));
  EXPECT_TRUE(all_close(tf, h_reshape(th, {24}), tol_exact()));
  const Tensor tr = t.reshape({2, 12});
  EXPECT_FALSE(same_storage(x, tr));
  EXPECT_TRUE(all_close(tr, h_reshape(th, {2, 12}), tol_exact()));
  // ...but merging only dims that stay contiguous is a view.
  const Tensor tp = x.permute({1, 2, 0}).flatten(0, 1);  // [12, 2], strides [1, 12]
  EXPECT_TRUE(same_storage(x, tp));
  EXPECT_TRUE(all_close(tp, h_reshape(permute(h, {1, 2, 0}), {12, 2}), tol_exact()));

  // A 0-dim tensor flattens to one element.
  const Host s = rand({});
  EXPECT_EQ(make(s, d()).flatten().sizes(), (Dims{1}));
  EXPECT_EQ(make(s, d()).reshape({1, 1}).sizes(), (Dims{1, 1}));
}

TEST_P(Views, ContiguousAndCloneCopyIndependently) {
  const Host h = rand({3, 4});
  const Tensor x = make(h, d());
  const Tensor same = x.contiguous();
  EXPECT_TRUE(same_storage(x, same));

  const Tensor t = x.t();
  Tensor c = t.contiguous();
  EXPECT_FALSE(same_storage(x, c));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), (Dims{3, 1}));
  EXPECT_EQ(c.storage_offset(), 0);
  EXPECT_TRUE(all_close(c, permute(h, {1, 0}), tol_exact()));

  Tensor k = x.clone();
  EXPECT_FALSE(same_storage(x, k));
  EXPECT_TRUE(all_close(k, h, tol_exact()));
  // Writing into the copies leaves the original alone.
  const double fill = d() == DType::Bool ? 0.0 : 3.0;
  k.fill_(fill);
  c.fill_(fill);
  EXPECT_TRUE(all_close(x, h, tol_exact()));
  EXPECT_TRUE(all_close(k, map(h, [&](double) { return fill; }), tol_exact()));
}

TEST_P(Views, WritesThroughViewsReachTheBase) {
  const Host h = rand({4, 6});
  const Tensor x = make(h, d());
  Host expected = h;
  const double a = d() == DType::Bool ? 1.0 : 5.0;
  const double b = d() == DType::Bool ? 0.0 : -7.0;

  x.select(0, 2).fill_(a);  // row 2
  for (int64_t j = 0; j < 6; ++j) expected.at({2, j}) = a;
  EXPECT_TRUE(all_close(x, expected, tol_exact()));

  x.t().select(0, 1).fill_(b);  // column 1 through a transposed view
  for (int64_t i = 0; i < 4; ++i) expected.at({i, 1}) = b;
  EXPECT_TRUE(all_close(x, expected, tol_exact()));

  // copy_ into a stepped view: columns 0, 2, 4 of rows 1..3.
  const Host src = rand({3, 3});
  x.slice(0, 1, 4).slice(1, 0, 6, 2).copy_(make(src, d()));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) expected.at({i + 1, 2 * j}) = src.at({i, j});
  EXPECT_TRUE(all_close(x, expected, tol_exact()));

  // copy_ broadcasts its source.
  const Host row = rand({6});
  x.narrow(0, 3, 1).copy_(make(row, d()));
  for (int64_t j = 0; j < 6; ++j) expected.at({3, j}) = row.at({j});
  EXPECT_TRUE(all_close(x, expected, tol_exact()));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Views, ::testing::ValuesIn(all_dtypes()), param_name);

// ---- dtype-independent cases

TEST(ViewsMisc, ViewOfStridedTensorWhereStridesAllow) {
  const Host h = random_host({4, 6}, DType::Float32);
  const Tensor x = make(h, DType::Float32);
  const Tensor rows = x.slice(0, 0, 4, 2);  // [2, 6] strides [12, 1]
  const Tensor v = rows.view({2, 2, 3});
  EXPECT_EQ(v.storage(), x.storage());
  EXPECT_EQ(v.strides(), (Dims{12, 3, 1}));
  EXPECT_TRUE(all_close(v, h_reshape(h_slice(h, 0, 0, 4, 2), {2, 2, 3}), tol_exact()));

  const Tensor t = x.t();                  // [6, 4] strides [1, 6]
  const Tensor split = t.view({6, 2, 2});  // splitting a dim is always a view
  EXPECT_EQ(split.storage(), x.storage());
  EXPECT_EQ(split.strides(), (Dims{1, 12, 6}));
  EXPECT_TRUE(all_close(split, h_reshape(permute(h, {1, 0}), {6, 2, 2}), tol_exact()));
}

TEST(ViewsMisc, EmptyAndSizeOneDims) {
  const Tensor x = make(Host({2, 0, 3}), DType::Float32);
  EXPECT_EQ(x.numel(), 0);
  EXPECT_EQ(x.transpose(0, 2).sizes(), (Dims{3, 0, 2}));
  EXPECT_EQ(x.view({0, 6}).sizes(), (Dims{0, 6}));
  EXPECT_EQ(x.reshape({3, 0, 2}).sizes(), (Dims{3, 0, 2}));
  EXPECT_EQ(x.slice(2, 1, 3).sizes(), (Dims{2, 0, 2}));
  EXPECT_EQ(x.select(0, 1).sizes(), (Dims{0, 3}));
  EXPECT_EQ(x.unsqueeze(1).sizes(), (Dims{2, 1, 0, 3}));
  EXPECT_EQ(x.flatten().sizes(), (Dims{0}));
  EXPECT_EQ(x.transpose(0, 1).contiguous().sizes(), (Dims{0, 2, 3}));
  EXPECT_EQ(x.expand({4, 2, 0, 3}).numel(), 0);
  EXPECT_TRUE(x.to_vector<double>().empty());

  // Size-1 dims: expanding and squeezing them.
  const Host h = random_host({1, 5, 1}, DType::Float64);
  const Tensor y = make(h, DType::Float64);
  EXPECT_TRUE(all_close(y.expand({3, 5, 2}), h_expand(h, {3, 5, 2}), tol_exact()));
  EXPECT_TRUE(all_close(y.squeeze(), h_reshape(h, {5}), tol_exact()));
  EXPECT_TRUE(all_close(y.select(2, 0).select(0, 0), h_reshape(h, {5}), tol_exact()));
}

TEST(ViewsMisc, ViewsKeepTheStorageAlive) {
  const Host h = random_host({5, 6}, DType::Float32);
  Tensor v;
  {
    const Tensor x = make(h, DType::Float32);
    v = x.t().slice(0, 1, 6, 2);
  }
  EXPECT_TRUE(all_close(v, h_slice(permute(h, {1, 0}), 0, 1, 6, 2), tol_exact()));
}

// Random chains of view ops against the host model of each op.
TEST(ViewsMisc, RandomChainsOfViewsMatchTheHostModel) {
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t rank = uniform_int(1, 4);
    Dims sizes;
    for (int64_t i = 0; i < rank; ++i) sizes.push_back(uniform_int(1, 5));
    Host h = random_host(sizes, DType::Int64, {0, 0, -100000, 100000});
    Tensor t = make(h, DType::Int64);
    std::ostringstream chain;
    chain << "x" << dims_string(sizes);
    for (int step = 0; step < 6; ++step) {
      const int64_t r = h.dim();
      const int64_t op = uniform_int(0, 6);
      if (r == 0) {
        t = t.unsqueeze(0);
        h = h_reshape(h, {1});
        chain << ".unsqueeze(0)";
      } else if (op == 0) {
        const int64_t d = uniform_int(0, r - 1), size = h.sizes[static_cast<size_t>(d)];
        const int64_t start = uniform_int(-size, size), end = uniform_int(-size, size + 1);
        const int64_t stp = uniform_int(1, 3);
        t = t.slice(d, start, end, stp);
        h = h_slice(h, d, start, end, stp);
        chain << ".slice(" << d << "," << start << "," << end << "," << stp << ")";
      } else if (op == 1 && r >= 2) {
        const int64_t a = uniform_int(0, r - 1), b = uniform_int(0, r - 1);
        t = t.transpose(a, b);
        h = permute(h, swapped(r, a, b));
        chain << ".transpose(" << a << "," << b << ")";
      } else if (op == 2 && h.numel() > 0) {
        const int64_t d = uniform_int(0, r - 1);
        const int64_t i = uniform_int(0, h.sizes[static_cast<size_t>(d)] - 1);
        t = t.select(d, i);
        h = h_select(h, d, i);
        chain << ".select(" << d << "," << i << ")";
      } else if (op == 3) {
        const int64_t d = uniform_int(0, r);
        t = t.unsqueeze(d);
        Dims s = h.sizes;
        s.insert(s.begin() + d, 1);
        h = h_reshape(h, s);
        chain << ".unsqueeze(" << d << ")";
      } else if (op == 4) {
        Dims target = h.sizes;
        for (auto& s : target)
          if (s == 1) s = uniform_int(1, 3);
        t = t.expand(target);
        h = h_expand(h, target);
        chain << ".expand(" << dims_string(target) << ")";
      } else if (op == 5) {
        t = t.reshape({-1});
        h = h_reshape(h, {h.numel()});
        chain << ".reshape(-1)";
      } else {
        Dims order;
        for (int64_t i = 0; i < r; ++i) order.push_back(i);
        std::shuffle(order.begin(), order.end(), rng());
        t = t.permute(order);
        h = permute(h, order);
        chain << ".permute(" << dims_string(order) << ")";
      }
      ASSERT_TRUE(all_close(t, h, tol_exact())) << chain.str();
    }
    ASSERT_TRUE(all_close(t.contiguous(), h, tol_exact())) << chain.str() << ".contiguous()";
  }
}

}  // namespace
}  // namespace kt
