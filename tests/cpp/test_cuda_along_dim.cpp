// The CUDA kernels of the ops along one dim, multinomial and nonzero against the CPU
// kernels on the same random inputs (every dtype, strided layouts, repeated indices, ties
// and NaN in sorts), bad indices raising IndexError on the device too, and multinomial
// drawing the same samples on both devices for the same state. Skipped without a GPU.
#include "reference.h"

namespace kt {
namespace {

using Fn = std::function<Tensor(const Tensor& x, Device device)>;

::testing::AssertionResult same_on_both(const Host& h, DType d, Layout layout, const Fn& f,
                                        Tol tol) {
  const Tensor yc = f(make(h, d, layout), kiln::kCPU);
  const Tensor yg = f(make(h, d, layout, kiln::cuda_device()), kiln::cuda_device());
  if (!yg.is_cuda()) return ::testing::AssertionFailure() << "the CUDA result is not on the GPU";
  if (yg.dtype() != yc.dtype()) return ::testing::AssertionFailure() << "dtypes differ";
  return all_close(read(yg), read(yc), tol);
}

Tensor index_on(const std::vector<int64_t>& v, const Dims& sizes, Device device) {
  return kiln::from_vector<int64_t>(v, sizes).to(device);
}

class CudaAlongDim : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaAlongDim, MatchesTheCpu) {
  const DType d = GetParam();
  Range r;
  r.ilo = -3, r.ihi = 3;
  Host h = random_host({5, 6, 3}, d, r);
  if (is_float(d)) h.v[3] = NAN;
  std::vector<int64_t> idx(5 * 4 * 3);
  for (auto& e : idx) e = uniform_int(0, 4);
  const Tol tol = is_float(d) ? tol_reduce(d) : tol_exact();
  const std::vector<Fn> cases = {
      [&](const Tensor& x, Device dev) {
        return kiln::gather(x, 1, index_on(idx, {5, 4, 3}, dev));
      },
      [&](const Tensor& x, Device dev) {
        return kiln::scatter(x, 1, index_on(idx, {5, 4, 3}, dev).narrow(1, 0, 1), x);
      },
      [&](const Tensor& x, Device dev) {
        return kiln::scatter(x, 0, index_on(idx, {5, 4, 3}, dev), kiln::Scalar(1));
      },
      [&](const Tensor& x, Device dev) {
        return d == DType::Bool ? x : kiln::scatter_add(x, 0, index_on(idx, {5, 4, 3}, dev), x);
      },
      [&](const Tensor& x, Device dev) {
        return d == DType::Bool
                   ? x
                   : kiln::index_add(x, 1, index_on({0, 5, 5, 2}, {4}, dev), x.narrow(1, 0, 4), 2);
      },
      [&](const Tensor& x, Device) { return kiln::argsort(x, 1, false, true); },
      [&](const Tensor& x, Device) { return kiln::sort(x, 0, true, true).values; },
      [&](const Tensor& x, Device) { return kiln::topk(x, 3, -1).indices; },
      [&](const Tensor& x, Device) { return kiln::cumsum(x, 1); },
      [&](const Tensor& x, Device) { return kiln::cumprod(x, 2); },
      [&](const Tensor& x, Device) { return kiln::prod(x, 0, true); },
      [&](const Tensor& x, Device) { return kiln::nonzero(x); },
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    for (Layout layout : {Layout::Contiguous, Layout::Permuted}) {
      EXPECT_TRUE(same_on_both(h, d, layout, cases[i], tol)) << "case " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAlongDim, ::testing::ValuesIn(all_dtypes()), param_name);

TEST(CudaAlongDimErrors, BadIndicesAndProbabilitiesRaiseOnTheDevice) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  // The kernels check their indices on the device (no host sync): the bad index is
  // raised, naming the op, at the next host read, and the runtime stays usable after it.
  const Tensor x = kiln::rand({3, 2}).cuda();
  EXPECT_TRUE(throws<kiln::IndexError>(
      [&] {
        read(kiln::gather(x, 0, index_on({0, 3}, {1, 2}, kiln::cuda_device())));
      },
      {"[gather] index 3", "raised at this host read"}));
  EXPECT_TRUE(throws<kiln::IndexError>(
      [&] {
        read(kiln::index_add(x, 0, index_on({-1}, {1}, kiln::cuda_device()), x.narrow(0, 0, 1)));
      },
      {"[index_add] index -1"}));
  EXPECT_TRUE(all_close(read(kiln::gather(x, 0, index_on({2, 0}, {1, 2}, kiln::cuda_device()))),
                        read(kiln::gather(x.cpu(), 0, index_on({2, 0}, {1, 2}, kiln::kCPU))),
                        tol_exact()));
  const Tensor bad = kiln::from_vector<float>({0.5f, -1.0f}, {2}).cuda();
  EXPECT_TRUE(throws<kiln::Error>([&] { kiln::multinomial(bad, 1); }, {"[multinomial]"}));
}

TEST(CudaMultinomial, SameStateSameSamplesAsTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Tensor probs = kiln::rand({4, 30});
  for (bool replacement : {false, true}) {
    const kiln::RandomState st{11, 3};
    const Tensor c = kiln::multinomial(probs, 7, replacement, st);
    const Tensor g = kiln::multinomial(probs.cuda(), 7, replacement, st);
    EXPECT_TRUE(all_close(read(g), read(c), tol_exact())) << replacement;
  }
}

}  // namespace
}  // namespace kt
