// The CUDA backend against the CPU backend: every op family on the same inputs (random,
// strided views, every dtype), transfers, views and in-place ops on the device,
// bit-identical rand/randn for the same seed, out-of-memory recovery, and bad indices
// found on the device (raised at the next host read, the runtime usable after). Skipped
// when no GPU is available.
#include <array>

#include "reference.h"
#include "runtime/cuda_context.h"

namespace kt {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Input {
  Host host;
  DType dtype;
  Layout layout = Layout::Contiguous;
};

// Runs f on CPU tensors and on CUDA tensors built from the same values and layouts and
// compares the results.
::testing::AssertionResult same_on_both(const std::vector<Input>& inputs, const Fn& f, Tol tol) {
  std::vector<Tensor> cpu, gpu;
  for (const Input& in : inputs) {
    cpu.push_back(make(in.host, in.dtype, in.layout));
    gpu.push_back(make(in.host, in.dtype, in.layout, kiln::cuda_device()));
  }
  const Tensor yc = f(cpu);
  const Tensor yg = f(gpu);
  if (!yg.defined() || !yg.is_cuda())
    return ::testing::AssertionFailure() << "the CUDA result is not on the GPU";
  if (yg.dtype() != yc.dtype())
    return ::testing::AssertionFailure()
           << "dtype " << name(yg.dtype()) << " on CUDA, " << name(yc.dtype()) << " on the CPU";
  return all_close(read(yg), read(yc), tol);
}

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

class CudaDType : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
  DType d() const { return GetParam(); }
};

const Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Stepped,
                           Layout::Permuted};

TEST_P(CudaDType, TransfersRoundTripExactly) {
  for (const Dims& s : {Dims{}, Dims{0}, Dims{7}, Dims{3, 4, 5}, Dims{1000, 33}}) {
    const Host h = random_host(s, d());
    for (Layout layout : kLayouts) {
      SCOPED_TRACE(dims_string(s) + " " + name(layout));
      const Tensor g = make(h, d(), layout).cuda();
      ASSERT_TRUE(g.is_cuda());
      EXPECT_TRUE(all_close(g.cpu(), h, tol_exact()));
      const Tensor gv = make(h, d(), layout, kiln::cuda_device());  // views made on the GPU
      EXPECT_TRUE(all_close(gv, h, tol_exact()));
      EXPECT_TRUE(all_close(gv.contiguous().cpu(), h, tol_exact()));
      EXPECT_TRUE(all_close(gv.clone(), h, tol_exact()));
    }
  }
}

TEST_P(CudaDType, CastsToEveryDType) {
  const Host h = random_host({5, 9}, d(), {-100.0, 100.0, -3000, 3000});
  for (DType to : all_dtypes()) {
    SCOPED_TRACE(name(to));
    EXPECT_TRUE(same_on_both(
        {{h, d(), Layout::Transposed}}, [to](const std::vector<Tensor>& t) { return t[0].to(to); },
        tol_exact()));
  }
}

TEST_P(CudaDType, UnaryOps) {
  if (d() == DType::Bool) GTEST_SKIP();
  const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> ops = {
      {"neg", [](const Tensor& x) { return kiln::neg(x); }},
      {"abs", [](const Tensor& x) { return kiln::abs(x); }},
      {"relu", [](const Tensor& x) { return kiln::relu(x); }},
      {"exp", [](const Tensor& x) { return kiln::exp(x); }},
      {"log", [](const Tensor& x) { return kiln::log(kiln::abs(x) + 1); }},
      {"sqrt", [](const Tensor& x) { return kiln::sqrt(kiln::abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return kiln::rsqrt(kiln::abs(x) + 1); }},
      {"sin", [](const Tensor& x) { return kiln::sin(x); }},
      {"cos", [](const Tensor& x) { return kiln::cos(x); }},
      {"tanh", [](const Tensor& x) { return kiln::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return kiln::sigmoid(x); }},
      {"gelu", [](const Tensor& x) { return kiln::gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return kiln::gelu(x, true); }},
      {"silu", [](const Tensor& x) { return kiln::silu(x); }},
      {"reciprocal", [](const Tensor& x) { return kiln::reciprocal(kiln::abs(x) + 1); }},
  };
  const DType out = is_float(d()) ? d() : DType::Float32;
  for (const Dims& s : {Dims{}, Dims{0, 3}, Dims{7, 13}, Dims{129, 257}}) {
    const Host h = random_host(s, d(), {-3.0, 3.0, -5, 5});
    for (const auto& [op_name, fn] : ops) {
      for (Layout layout : kLayouts) {
        SCOPED_TRACE(std::string(op_name) + " " + dims_string(s) + " " + name(layout));
        EXPECT_TRUE(same_on_both(
            {{h, d(), layout}}, [fn = fn](const std::vector<Tensor>& t) { return fn(t[0]); },
            tol_pointwise(out)));
      }
    }
  }
}

TEST_P(CudaDType, BinaryOpsBroadcastingAndScalars) {
  using BF = Tensor (*)(const Tensor&, const Tensor&);
  std::vector<std::pair<const char*, BF>> ops = {
      {"eq", [](const Tensor& a, const Tensor& b) { return kiln::eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return kiln::ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return kiln::lt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return kiln::ge(a, b); }}};
  if (d() != DType::Bool) {
    ops.insert(ops.end(),
               {{"add", [](const Tensor& a, const Tensor& b) { return kiln::add(a, b); }},
                {"sub", [](const Tensor& a, const Tensor& b) { return kiln::sub(a, b); }},
                {"mul", [](const Tensor& a, const Tensor& b) { return kiln::mul(a, b); }},
                {"div", [](const Tensor& a, const Tensor& b) { return kiln::div(a, b); }},
                {"maximum", [](const Tensor& a, const Tensor& b) { return kiln::maximum(a, b); }},
                {"minimum", [](const Tensor& a, const Tensor& b) { return kiln::minimum(a, b); }},
                {"pow", [](const Tensor& a, const Tensor& b) {
                   return kiln::pow(kiln::abs(a), kiln::abs(b));
                 }}});
  }
  const DType out = is_float(d()) ? d() : DType::Float32;
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{4, 5}, {4, 5}}, {{3, 1, 5}, {4, 5}}, {{2, 3}, {}}, {{0, 3}, {1, 3}}, {{257, 129}, {129}}};
  for (const auto& [sa, sb] : shapes) {
    const Host a = random_host(sa, d(), {-2.0, 2.0, -4, 4});
    const Host b = random_host(sb, d(), {-2.0, 2.0, -4, 4, true, 0.25});
    for (const auto& [op_name, fn] : ops) {
      SCOPED_TRACE(std::string(op_name) + " " + dims_string(sa) + " " + dims_string(sb));
      EXPECT_TRUE(same_on_both(
          {{a, d(), Layout::Transposed}, {b, d(), Layout::Stepped}},
          [fn = fn](const std::vector<Tensor>& t) { return fn(t[0], t[1]); }, tol_pointwise(out)));
    }
  }
  if (d() != DType::Bool) {
    const Host a = random_host({6, 7}, d(), {-2.0, 2.0, -4, 4});
    const kiln::Scalar s = is_int(d()) ? kiln::Scalar(3) : kiln::Scalar(1.5);
    auto both = [&](const Fn& f) {
      EXPECT_TRUE(same_on_both({{a, d(), Layout::Permuted}}, f, tol_pointwise(out)));
    };
    both([&](const std::vector<Tensor>& t) { return kiln::sub(t[0], s); });
    both([&](const std::vector<Tensor>& t) { return kiln::sub(s, t[0]); });
    both([&](const std::vector<Tensor>& t) { return kiln::mul(t[0], 2.5); });
    both([&](const std::vector<Tensor>& t) { return kiln::gt(t[0], s); });
    both([&](const std::vector<Tensor>& t) { return kiln::pow(t[0], 2); });
  }
}

TEST_P(CudaDType, WhereClampAndInPlaceIntoViews) {
  const Host c = random_host({5, 1}, DType::Bool);
  const Host a = random_host({1, 6}, d()), b = random_host({5, 6}, d());
  EXPECT_TRUE(same_on_both(
      {{c, DType::Bool}, {a, d()}, {b, d(), Layout::Transposed}},
      [](const std::vector<Tensor>& t) { return kiln::where(t[0], t[1], t[2]); }, tol_exact()));
  if (d() == DType::Bool) return;
  EXPECT_TRUE(same_on_both(
      {{b, d(), Layout::Stepped}},
      [](const std::vector<Tensor>& t) { return kiln::clamp(t[0], -1, 1); }, tol_exact()));
  // In place into a strided view of a device tensor; the whole base is compared.
  EXPECT_TRUE(same_on_both(
      {{b, d()}, {a, d()}},
      [](const std::vector<Tensor>& t) {
        Tensor base = t[0].clone();
        base.slice(1, 1, 6, 2).add_(t[1].slice(1, 0, 3));
        base.t().mul_(2);
        base.select(0, 3).clamp_(-1, 1);
        base.narrow(0, 1, 2).relu_();
        return base;
      },
      tol_pointwise(d())));
}

TEST_P(CudaDType, Reductions) {
  const DType acc = is_float(d()) ? d() : DType::Int64;
  const DType flt = is_float(d()) ? d() : DType::Float32;
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{4, 5, 6}, {}},   {{4, 5, 6}, {1}},     {{4, 5, 6}, {0, 2}}, {{513, 257}, {0}},
      {{513, 257}, {1}}, {{2, 3, 2049}, {-1}}, {{0, 4}, {0}},       {{}, {}}};
  for (const auto& [s, dims] : cases) {
    const Host h = random_host(s, d());
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(dims_string(s) + " dims " + dims_string(dims) + (keepdim ? " keepdim" : ""));
      const Input in{h, d(), Layout::Permuted};
      Tol sum_tol = tol_reduce(acc);
      sum_tol.atol *= std::sqrt(static_cast<double>(std::max<int64_t>(1, h.numel())));
      EXPECT_TRUE(same_on_both(
          {in}, [&](const std::vector<Tensor>& t) { return kiln::sum(t[0], dims, keepdim); },
          sum_tol));
      if (d() == DType::Bool) continue;
      EXPECT_TRUE(same_on_both(
          {in}, [&](const std::vector<Tensor>& t) { return kiln::mean(t[0], dims, keepdim); },
          tol_reduce(flt)));
      if (h.numel() == 0) continue;
      EXPECT_TRUE(same_on_both(
          {in}, [&](const std::vector<Tensor>& t) { return kiln::amax(t[0], dims, keepdim); },
          tol_exact()));
      EXPECT_TRUE(same_on_both(
          {in}, [&](const std::vector<Tensor>& t) { return kiln::amin(t[0], dims, keepdim); },
          tol_exact()));
      if (dims.size() <= 1) {
        EXPECT_TRUE(same_on_both(
            {in},
            [&](const std::vector<Tensor>& t) {
              return dims.empty() ? kiln::argmax(t[0]) : kiln::argmax(t[0], dims[0], keepdim);
            },
            tol_exact()));
      }
      if (is_float(d())) {
        EXPECT_TRUE(same_on_both(
            {in}, [&](const std::vector<Tensor>& t) { return kiln::var(t[0], dims, 1, keepdim); },
            tol_reduce(flt)));
      }
    }
  }
}

TEST_P(CudaDType, SoftmaxLayerNorm) {
  if (!is_float(d())) GTEST_SKIP();
  for (const Dims& s : {Dims{3, 4, 5}, Dims{2, 4099}, Dims{64, 1000}, Dims{0, 5}}) {
    const Host h = random_host(s, d(), {-4.0, 4.0});
    for (int64_t dim = 0; dim < static_cast<int64_t>(s.size()); ++dim) {
      SCOPED_TRACE(dims_string(s) + " dim " + std::to_string(dim));
      EXPECT_TRUE(same_on_both(
          {{h, d(), Layout::Transposed}},
          [dim](const std::vector<Tensor>& t) { return kiln::softmax(t[0], dim); },
          tol_pointwise(d())));
      EXPECT_TRUE(same_on_both(
          {{h, d(), Layout::Stepped}},
          [dim](const std::vector<Tensor>& t) { return kiln::log_softmax(t[0], dim); },
          tol_pointwise(d())));
    }
    const Dims ns = {s.back()};
    const Host w = random_host(ns, d()), b = random_host(ns, d());
    EXPECT_TRUE(same_on_both(
        {{h, d(), Layout::Transposed}, {w, d()}, {b, d(), Layout::Stepped}},
        [&](const std::vector<Tensor>& t) { return kiln::layer_norm(t[0], ns, t[1], t[2]); },
        tol_reduce(d())));
    EXPECT_TRUE(same_on_both(
        {{h, d()}}, [&](const std::vector<Tensor>& t) { return kiln::layer_norm(t[0], ns); },
        tol_reduce(d())));
  }
}

TEST_P(CudaDType, MatmulLinearConvPool) {
  if (!is_float(d())) GTEST_SKIP();
  const std::vector<std::pair<Dims, Dims>> mm = {{{3}, {3}},
                                                 {{4}, {4, 5}},
                                                 {{3, 4}, {4}},
                                                 {{65, 130}, {130, 67}},
                                                 {{2, 1, 3, 4}, {5, 4, 2}},
                                                 {{3, 0}, {0, 5}},
                                                 {{128, 512}, {512, 96}}};
  for (const auto& [sa, sb] : mm) {
    SCOPED_TRACE(dims_string(sa) + " @ " + dims_string(sb));
    const Host a = random_host(sa, d(), {-1.0, 1.0}), b = random_host(sb, d(), {-1.0, 1.0});
    Tol tol = tol_reduce(d());
    tol.atol *= std::sqrt(static_cast<double>(sa.back()));
    for (Layout la : {Layout::Contiguous, Layout::Transposed})
      for (Layout lb : {Layout::Contiguous, Layout::Transposed})
        EXPECT_TRUE(same_on_both(
            {{a, d(), la}, {b, d(), lb}},
            [](const std::vector<Tensor>& t) { return kiln::matmul(t[0], t[1]); }, tol));
  }
  const Host x = random_host({2, 3, 24}, d(), {-1.0, 1.0});
  const Host w = random_host({10, 24}, d(), {-1.0, 1.0}), bias = random_host({10}, d());
  Tol tol = tol_reduce(d());
  tol.atol *= 5;
  EXPECT_TRUE(same_on_both(
      {{x, d(), Layout::Stepped}, {w, d(), Layout::Transposed}, {bias, d()}},
      [](const std::vector<Tensor>& t) { return kiln::linear(t[0], t[1], t[2]); }, tol));
  EXPECT_TRUE(same_on_both(
      {{x, d()}, {w, d()}}, [](const std::vector<Tensor>& t) { return kiln::linear(t[0], t[1]); },
      tol));

  const Host img = random_host({2, 3, 9, 11}, d(), {-1.0, 1.0});
  const Host k = random_host({4, 3, 3, 2}, d(), {-1.0, 1.0}), kb = random_host({4}, d());
  for (const auto& [stride, pad] :
       std::vector<std::pair<std::array<int64_t, 2>, std::array<int64_t, 2>>>{{{1, 1}, {1, 1}},
                                                                              {{2, 1}, {0, 1}}}) {
    EXPECT_TRUE(same_on_both(
        {{img, d(), Layout::Permuted}, {k, d()}, {kb, d()}},
        [stride = stride, pad = pad](const std::vector<Tensor>& t) {
          return kiln::conv2d(t[0], t[1], t[2], stride, pad);
        },
        tol));
  }
  EXPECT_TRUE(same_on_both(
      {{img, d(), Layout::Stepped}},
      [](const std::vector<Tensor>& t) {
        return kiln::max_pool2d(t[0], {3, 3}, {2, 2}, {1, 1});
      },
      tol_exact()));
  EXPECT_TRUE(same_on_both(
      {{img, d(), Layout::Permuted}},
      [](const std::vector<Tensor>& t) {
        return kiln::avg_pool2d(t[0], {2, 3}, {0, 0}, {1, 1});
      },
      tol_pointwise(d())));
}

TEST_P(CudaDType, JoinIndexAndFactories) {
  const Host a = random_host({4, 3}, d()), b = random_host({4, 5}, d());
  EXPECT_TRUE(same_on_both(
      {{a, d(), Layout::Transposed}, {b, d(), Layout::Stepped}},
      [](const std::vector<Tensor>& t) {
        return kiln::cat({t[0], t[1]}, 1);
      },
      tol_exact()));
  EXPECT_TRUE(same_on_both(
      {{a, d()}, {a, d(), Layout::Transposed}},
      [](const std::vector<Tensor>& t) {
        return kiln::stack({t[0], t[1]}, 1);
      },
      tol_exact()));
  const Host idx({6}, {3, 0, 3, 1, 2, 0});
  for (DType id : {DType::Int64, DType::Int32}) {
    EXPECT_TRUE(same_on_both(
        {{b, d(), Layout::Transposed}, {idx, id}},
        [](const std::vector<Tensor>& t) { return kiln::index_select(t[0], 0, t[1]); },
        tol_exact()));
    EXPECT_TRUE(same_on_both(
        {{b, d()}, {Host({2, 3}, idx.v), id}},
        [](const std::vector<Tensor>& t) { return kiln::embedding(t[0], t[1]); }, tol_exact()));
  }
  const kiln::TensorOptions on_gpu(d(), kiln::cuda_device());
  const kiln::Scalar v = d() == DType::Bool ? kiln::Scalar(true) : kiln::Scalar(3);
  for (const Dims& s : {Dims{}, Dims{0}, Dims{3, 70001}}) {
    EXPECT_TRUE(all_close(kiln::zeros(s, on_gpu).cpu(), read(kiln::zeros(s, d())), tol_exact()));
    EXPECT_TRUE(all_close(kiln::ones(s, on_gpu).cpu(), read(kiln::ones(s, d())), tol_exact()));
    EXPECT_TRUE(
        all_close(kiln::full(s, v, on_gpu).cpu(), read(kiln::full(s, v, d())), tol_exact()));
    EXPECT_TRUE(kiln::empty(s, on_gpu).is_cuda());
  }
  if (d() != DType::Bool) {
    EXPECT_TRUE(all_close(kiln::arange(2, 40, 3, on_gpu).cpu(), read(kiln::arange(2, 40, 3, d())),
                          tol_exact()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, CudaDType, ::testing::ValuesIn(all_dtypes()), param_name);

class CudaRandom : public CudaDType {};

TEST_P(CudaRandom, RandIsBitIdenticalToTheCpuAndRandnAgrees) {
  const auto seed = static_cast<uint64_t>(uniform_int(0, 1ll << 62));
  for (const Dims& s : {Dims{1}, Dims{1000, 37}, Dims{5, 0}}) {
    SCOPED_TRACE(dims_string(s));
    kiln::manual_seed(seed);
    const Host rc = read(kiln::rand(s, d()));
    const Host nc = read(kiln::randn(s, d()));
    kiln::manual_seed(seed);
    const Tensor rg = kiln::rand(s, kiln::TensorOptions(d(), kiln::cuda_device()));
    const Tensor ng = kiln::randn(s, kiln::TensorOptions(d(), kiln::cuda_device()));
    ASSERT_TRUE(rg.is_cuda());
    EXPECT_TRUE(all_close(rg, rc, tol_exact()));
    // randn goes through log/cos: CUDA's double versions may round the last bit
    // differently from glibc's, so float64 agrees to a few ulp (narrower types exactly).
    EXPECT_TRUE(all_close(ng, nc, d() == DType::Float64 ? Tol{1e-14, 1e-15} : tol_exact()));
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, CudaRandom, ::testing::ValuesIn(float_dtypes()), param_name);

TEST_F(Cuda, CopyAcrossDevicesIntoViews) {
  const Host h = random_host({4, 6}, DType::Float32), src = random_host({4, 3}, DType::Float32);
  Tensor g = make(h, DType::Float32).cuda();
  g.slice(1, 0, 6, 2).copy_(make(src, DType::Float32));  // host -> device view
  Host expected = h;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) expected.at({i, 2 * j}) = src.at({i, j});
  EXPECT_TRUE(all_close(g, expected, tol_exact()));
  Tensor c = make(Host({6, 4}), DType::Float32);
  c.t().copy_(g);  // device -> host view
  EXPECT_TRUE(all_close(c, permute(expected, {1, 0}), tol_exact()));
}

// A capture pool (cuda_context.h) reuses the blocks released while it is open for its own
// later allocations, never hands them to anyone outside, and gives them to the cache when
// it dies; the peak counts the pool's blocks once.
TEST_F(Cuda, CapturePoolReusesItsReleasedBlocksOnlyForItself) {
  namespace cc = kiln::cuda_context;
  const size_t bytes = size_t{4} << 20;  // a whole number of 2 MiB blocks
  cc::reset_peak_allocated(0);
  const size_t before = cc::allocated_bytes(0);
  void* a = nullptr;
  {
    cc::CapturePool pool(0);
    pool.open();
    a = cc::allocate(bytes, 0);
    cc::release(a, bytes, 0);
    void* b = cc::allocate(bytes, 0);  // the graph's earlier temporary, reused
    EXPECT_EQ(b, a);
    cc::release(b, bytes, 0);
    pool.close();
    void* c = cc::allocate(bytes, 0);  // outside the pool: never the graph's block
    EXPECT_NE(c, a);
    cc::release(c, bytes, 0);
    EXPECT_LT(cc::peak_allocated_bytes(0) - before, 3 * bytes);  // a and c; without reuse a, b, c
  }
  void* d = cc::allocate(bytes, 0);  // the pool died: its block is the cache's again
  EXPECT_TRUE(d == a || cc::cached_bytes(0) >= bytes);
  cc::release(d, bytes, 0);
  EXPECT_EQ(cc::allocated_bytes(0), before);
}

TEST_F(Cuda, OutOfMemoryIsAnErrorAndTheRuntimeRecovers) {
  const size_t before = kiln::cuda_context::allocated_bytes(0);
  EXPECT_TRUE(throws<kiln::OutOfMemoryError>(
      [] {
        kiln::empty({int64_t{1} << 38}, kiln::TensorOptions(DType::Float32, kiln::cuda_device()));
      },
      {}));
  EXPECT_EQ(kiln::cuda_context::allocated_bytes(0), before);
  const Host a = random_host({300, 200}, DType::Float32);
  EXPECT_TRUE(same_on_both(
      {{a, DType::Float32}}, [](const std::vector<Tensor>& t) { return kiln::exp(t[0]) + 1; },
      tol_pointwise(DType::Float32)));
}

// index_select / embedding check their indices on the device: the op itself does not
// wait for the GPU; the next host read (a copy to the host, synchronize) raises IndexError
// naming index_select, the bad index and the size (kiln's internal waits do not take it);
// the record is cleared, so the next ops and reads work.
TEST_F(Cuda, BadIndexIsRaisedAtTheNextHostRead) {
  const Host xs = random_host({5, 3}, DType::Float32);
  const Tensor x = make(xs, DType::Float32, kiln::cuda_device());
  for (DType id : {DType::Int64, DType::Int32}) {
    SCOPED_TRACE(name(id));
    Tensor y;
    ASSERT_NO_THROW(
        y = kiln::index_select(x, 0, make(Host({3}, {0, 7, 1}), id, kiln::cuda_device())));
    EXPECT_TRUE(throws<kiln::IndexError>([&] { y.cpu(); },
                                         {"[index_select]", "index 7", "dim 0", "size 5"}));
    const Tensor good =
        kiln::index_select(x, 0, make(Host({3}, {4, 0, 4}), id, kiln::cuda_device()));
    Host expected({3, 3});
    for (int j = 0; j < 3; ++j)
      for (int c = 0; c < 3; ++c) expected.v[j * 3 + c] = xs.v[(j == 1 ? 0 : 4) * 3 + c];
    EXPECT_TRUE(all_close(good, expected, tol_exact()));
  }
  // embedding, a negative index, raised by synchronize; dim 1 of index_select after it
  const Tensor e =
      kiln::embedding(x, make(Host({2, 2}, {1, -2, 0, 3}), DType::Int64, kiln::cuda_device()));
  EXPECT_TRUE(e.is_cuda());
  kiln::cuda_context::synchronize(0);  // kiln's own wait leaves the record to the user
  EXPECT_TRUE(throws<kiln::IndexError>([] { kiln::cuda_context::synchronize_checked(0); },
                                       {"[index_select]", "index -2", "size 5"}));
  EXPECT_NO_THROW(kiln::cuda_context::synchronize_checked(0));
  const Tensor cols =
      kiln::index_select(x, 1, make(Host({1}, {3}), DType::Int64, kiln::cuda_device()));
  EXPECT_TRUE(throws<kiln::IndexError>([&] { cols.cpu(); }, {"index 3", "dim 1", "size 3"}));
  EXPECT_TRUE(
      all_close(kiln::index_select(x, 1, make(Host({1}, {2}), DType::Int64, kiln::cuda_device())),
                Host({5, 1}, {xs.v[2], xs.v[5], xs.v[8], xs.v[11], xs.v[14]}), tol_exact()));
}

}  // namespace
}  // namespace kt
