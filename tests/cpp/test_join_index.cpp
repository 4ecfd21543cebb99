// cat / stack / chunk / split / index_select / embedding for every dtype: sizes along
// the joined dim (including 0), dtype promotion in cat, strided inputs, views returned
// by chunk/split, repeated/empty/int32 indices.
#include "reference.h"

namespace kt {
namespace {

Host ref_cat(const std::vector<Host>& parts, int64_t dim) {
  dim = wrap(dim, parts[0].dim());
  Dims sizes = parts[0].sizes;
  sizes[static_cast<size_t>(dim)] = 0;
  for (const Host& p : parts) sizes[static_cast<size_t>(dim)] += p.sizes[static_cast<size_t>(dim)];
  Host out(sizes);
  for_each_index(sizes, [&](const Dims& i) {
    Dims j = i;
    for (const Host& p : parts) {
      const int64_t n = p.sizes[static_cast<size_t>(dim)];
      if (j[static_cast<size_t>(dim)] < n) {
        out.at(i) = p.at(j);
        return;
      }
      j[static_cast<size_t>(dim)] -= n;
    }
  });
  return out;
}

Host ref_narrow(const Host& h, int64_t dim, int64_t start, int64_t length) {
  Dims sizes = h.sizes;
  sizes[static_cast<size_t>(dim)] = length;
  Host out(sizes);
  for_each_index(sizes, [&](const Dims& i) {
    Dims j = i;
    j[static_cast<size_t>(dim)] += start;
    out.at(i) = h.at(j);
  });
  return out;
}

Host ref_index_select(const Host& h, int64_t dim, const std::vector<int64_t>& index) {
  dim = wrap(dim, h.dim());
  Dims sizes = h.sizes;
  sizes[static_cast<size_t>(dim)] = static_cast<int64_t>(index.size());
  Host out(sizes);
  for_each_index(sizes, [&](const Dims& i) {
    Dims j = i;
    j[static_cast<size_t>(dim)] = index[static_cast<size_t>(i[static_cast<size_t>(dim)])];
    out.at(i) = h.at(j);
  });
  return out;
}

Tensor index_tensor(const std::vector<int64_t>& idx, const Dims& sizes, DType d) {
  if (d == DType::Int64) return kiln::from_vector<int64_t>(idx, sizes);
  return kiln::from_vector<int32_t>(std::vector<int32_t>(idx.begin(), idx.end()), sizes);
}

class Join : public ::testing::TestWithParam<DType> {};

TEST_P(Join, CatAlongEveryDimWithEmptyParts) {
  const DType d = GetParam();
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t wd = wrap(dim, 3);
    std::vector<Host> parts;
    for (int64_t n : {2, 0, 3, 1}) {
      Dims s = {4, 5, 6};
      s[static_cast<size_t>(wd)] = n;
      parts.push_back(random_host(s, d));
    }
    const Host expected = ref_cat(parts, dim);
    for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Stepped}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " " + name(layout));
      std::vector<Tensor> ts;
      for (const Host& p : parts) ts.push_back(make(p, d, layout));
      const Tensor y = kiln::cat(ts, dim);
      ASSERT_TRUE(has_meta(y, expected.sizes, d));
      EXPECT_TRUE(all_close(y, expected, tol_exact()));
    }
  }
  // One tensor, and a 1-D cat.
  const Host one = random_host({3, 2}, d);
  EXPECT_TRUE(all_close(kiln::cat({make(one, d)}, 1), one, tol_exact()));
  const Host a = random_host({3}, d), b = random_host({5}, d);
  EXPECT_TRUE(all_close(kiln::cat({make(a, d), make(b, d, Layout::Stepped)}), ref_cat({a, b}, 0),
                        tol_exact()));
}

TEST_P(Join, StackInsertsANewDim) {
  const DType d = GetParam();
  std::vector<Host> parts;
  for (int i = 0; i < 3; ++i) parts.push_back(random_host({2, 4}, d));
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    const int64_t wd = wrap(dim, 3);
    std::vector<Host> unsq;
    for (const Host& p : parts) {
      Dims s = p.sizes;
      s.insert(s.begin() + wd, 1);
      unsq.push_back(Host(s, p.v));
    }
    const Host expected = ref_cat(unsq, wd);
    SCOPED_TRACE("dim " + std::to_string(dim));
    std::vector<Tensor> ts;
    for (const Host& p : parts) ts.push_back(make(p, d, Layout::Transposed));
    const Tensor y = kiln::stack(ts, dim);
    ASSERT_TRUE(has_meta(y, expected.sizes, d));
    EXPECT_TRUE(all_close(y, expected, tol_exact()));
  }
}

TEST_P(Join, ChunkAndSplitReturnViews) {
  const DType d = GetParam();
  const Host h = random_host({10, 6}, d);
  const Tensor x = make(h, d);
  struct ChunkCase {
    int64_t n, chunks;
    std::vector<int64_t> sizes;
  };
  // PyTorch: chunk size ceil(n / chunks); fewer chunks when that covers the dim.
  const ChunkCase chunks[] = {{10, 3, {4, 4, 2}},
                              {10, 4, {3, 3, 3, 1}},
                              {10, 1, {10}},
                              {10, 10, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
                              {10, 12, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
                              {6, 4, {2, 2, 2}},
                              {6, 5, {2, 2, 2}}};
  for (const ChunkCase& c : chunks) {
    SCOPED_TRACE("chunk " + std::to_string(c.n) + " into " + std::to_string(c.chunks));
    const int64_t dim = c.n == 10 ? 0 : 1;
    const std::vector<Tensor> parts = kiln::chunk(x, c.chunks, dim);
    ASSERT_EQ(parts.size(), c.sizes.size());
    int64_t start = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(parts[i].storage(), x.storage()) << "chunk " << i << " is not a view";
      EXPECT_TRUE(all_close(parts[i], ref_narrow(h, dim, start, c.sizes[i]), tol_exact()));
      start += c.sizes[i];
    }
  }
  // split by size: 10 by 3 -> 3, 3, 3, 1; by sizes (with a zero).
  const std::vector<Tensor> s3 = kiln::split(x, 3);
  ASSERT_EQ(s3.size(), 4u);
  EXPECT_TRUE(all_close(s3[3], ref_narrow(h, 0, 9, 1), tol_exact()));
  const std::vector<Tensor> ss = kiln::split(x, std::vector<int64_t>{1, 0, 5}, -1);
  ASSERT_EQ(ss.size(), 3u);
  EXPECT_TRUE(all_close(ss[0], ref_narrow(h, 1, 0, 1), tol_exact()));
  EXPECT_EQ(ss[1].sizes(), (Dims{10, 0}));
  EXPECT_TRUE(all_close(ss[2], ref_narrow(h, 1, 1, 5), tol_exact()));
  for (const Tensor& t : ss) EXPECT_EQ(t.storage(), x.storage());
  // Writing into a chunk writes into the original.
  if (d != DType::Bool) {
    Tensor c0 = kiln::chunk(x, 2, 1)[1];
    c0.fill_(7);
    Host expected = h;
    for (int64_t i = 0; i < 10; ++i)
      for (int64_t j = 3; j < 6; ++j) expected.at({i, j}) = 7;
    EXPECT_TRUE(all_close(x, expected, tol_exact()));
  }
}

TEST_P(Join, IndexSelectAlongEachDim) {
  const DType d = GetParam();
  const Host h = random_host({5, 6, 7}, d);
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t n = h.sizes[static_cast<size_t>(wrap(dim, 3))];
    std::vector<int64_t> idx;
    for (int i = 0; i < 9; ++i) idx.push_back(uniform_int(0, n - 1));  // repeats likely
    idx.push_back(n - 1);
    idx.push_back(0);
    for (DType index_dtype : {DType::Int64, DType::Int32}) {
      for (Layout layout : {Layout::Contiguous, Layout::Permuted}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " index " + name(index_dtype) + " " +
                     name(layout));
        const Tensor y =
            kiln::index_select(make(h, d, layout), dim,
                               index_tensor(idx, {static_cast<int64_t>(idx.size())}, index_dtype));
        const Host expected = ref_index_select(h, dim, idx);
        ASSERT_TRUE(has_meta(y, expected.sizes, d));
        EXPECT_TRUE(all_close(y, expected, tol_exact()));
      }
    }
  }
  // Empty index and a strided index tensor.
  const Tensor empty = kiln::index_select(make(h, d), 1, index_tensor({}, {0}, DType::Int64));
  EXPECT_TRUE(has_meta(empty, {5, 0, 7}, d));
  const Tensor strided_index =
      kiln::from_vector<int64_t>({4, -1, 0, -1, 2, -1}, {6}).slice(0, 0, 6, 2);  // 4, 0, 2
  EXPECT_TRUE(all_close(kiln::index_select(make(h, d), 0, strided_index),
                        ref_index_select(h, 0, {4, 0, 2}), tol_exact()));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Join, ::testing::ValuesIn(all_dtypes()), param_name);

TEST(JoinMisc, CatPromotesMixedDTypes) {
  const Host a = random_host({2, 3}, DType::Int32), b = random_host({1, 3}, DType::Float32);
  const Tensor y = kiln::cat({make(a, DType::Int32), make(b, DType::Float32)}, 0);
  ASSERT_TRUE(has_meta(y, {3, 3}, DType::Float32));
  EXPECT_TRUE(all_close(y, ref_cat({a, b}, 0), tol_exact()));
  const Host c = random_host({2, 3}, DType::Bool), e = random_host({2, 3}, DType::Int64);
  const Tensor z = kiln::cat({make(c, DType::Bool), make(e, DType::Int64)}, 1);
  ASSERT_TRUE(has_meta(z, {2, 6}, DType::Int64));
  EXPECT_TRUE(all_close(z, ref_cat({c, e}, 1), tol_exact()));
}

TEST(JoinMisc, CatOfLargeTensors) {
  const Host a = random_host({300, 129}, DType::Float32), b = random_host({300, 7}, DType::Float32);
  EXPECT_TRUE(all_close(
      kiln::cat({make(a, DType::Float32, Layout::Transposed), make(b, DType::Float32)}, 1),
      ref_cat({a, b}, 1), tol_exact()));
}

class Embedding : public ::testing::TestWithParam<DType> {};

TEST_P(Embedding, LooksUpRowsForAnyIndexShape) {
  const DType d = GetParam();
  const int64_t vocab = 11, dim = 6;
  const Host w = random_host({vocab, dim}, d);
  for (const Dims& shape : {Dims{}, Dims{5}, Dims{2, 3}, Dims{0}, Dims{2, 1, 4}}) {
    std::vector<int64_t> idx(static_cast<size_t>(numel_of(shape)));
    for (auto& i : idx) i = uniform_int(0, vocab - 1);
    for (DType index_dtype : {DType::Int64, DType::Int32}) {
      SCOPED_TRACE(dims_string(shape) + " " + name(index_dtype));
      const Tensor y =
          kiln::embedding(make(w, d, Layout::Transposed), index_tensor(idx, shape, index_dtype));
      Dims out_sizes = shape;
      out_sizes.push_back(dim);
      Host expected = ref_index_select(w, 0, idx);
      expected.sizes = out_sizes;
      ASSERT_TRUE(has_meta(y, out_sizes, d));
      EXPECT_TRUE(all_close(y, expected, tol_exact()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Embedding, ::testing::ValuesIn(all_dtypes()), param_name);

}  // namespace
}  // namespace kt
