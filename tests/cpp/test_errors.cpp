// Every user-facing error path: the exception type (ShapeError, IndexError, DTypeError,
// DeviceError, ValueError, OutOfMemoryError), a message that names the op in brackets
// and the expected vs actual shapes/dtypes/devices, and a runtime that still works
// after each error.
#include "reference.h"

namespace kt {
namespace {

using kiln::DeviceError;
using kiln::DTypeError;
using kiln::IndexError;
using kiln::OutOfMemoryError;
using kiln::ShapeError;
using kiln::ValueError;

using Check = std::function<::testing::AssertionResult()>;

struct ErrorCase {
  std::string name;
  Check check;
};

template <class E>
ErrorCase expect(std::string name, std::function<void()> f, std::vector<std::string> subs) {
  return {std::move(name), [f, subs] { return throws<E>(f, subs); }};
}

Tensor f32(const Dims& s) { return make(random_host(s, DType::Float32), DType::Float32); }
Tensor typed(const Dims& s, DType d) { return make(random_host(s, d), d); }
Tensor idx64(std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return kiln::from_vector<int64_t>(v, {n});
}

const std::vector<ErrorCase>& error_cases() {
  static const std::vector<ErrorCase> cases = {
      // ---- shapes
      expect<ShapeError>("BinaryShapes",
                         [] {
                           kiln::add(f32({2, 3}), f32({4}));
                         },
                         {"[add]", "[2, 3]", "[4]"}),
      expect<ShapeError>("ComparisonShapes",
                         [] {
                           kiln::lt(f32({5, 2}), f32({3, 1}));
                         },
                         {"[lt]", "[5, 2]", "[3, 1]"}),
      expect<ShapeError>("WhereShapes",
                         [] { kiln::where(typed({2}, DType::Bool), f32({3}), f32({3})); },
                         {"[where]", "[2]", "[3]"}),
      expect<ShapeError>("MatmulInnerDims",
                         [] {
                           kiln::matmul(f32({2, 3}), f32({4, 5}));
                         },
                         {"[matmul]", "[2, 3]", "[4, 5]"}),
      expect<ShapeError>("MatmulVectorDims", [] { kiln::matmul(f32({3}), f32({4})); },
                         {"[matmul]", "[3]", "[4]"}),
      expect<ShapeError>("MatmulZeroDim", [] { kiln::matmul(f32({}), f32({3})); }, {"[matmul]"}),
      expect<ShapeError>("MatmulBatchDims",
                         [] {
                           kiln::matmul(f32({2, 3, 4}), f32({3, 4, 5}));
                         },
                         {"[matmul]", "[2]", "[3]"}),
      expect<ShapeError>("LinearFeatures",
                         [] {
                           kiln::linear(f32({5, 3}), f32({4, 2}));
                         },
                         {"[linear]", "[5, 3]", "[4, 2]"}),
      expect<ShapeError>("LinearBias",
                         [] {
                           kiln::linear(f32({5, 3}), f32({4, 3}), f32({3}));
                         },
                         {"[linear]", "[4]", "[3]"}),
      expect<ShapeError>("CatSizes",
                         [] {
                           kiln::cat({f32({2, 3}), f32({2, 4})}, 0);
                         },
                         {"[cat]", "[2, 3]", "[2, 4]"}),
      expect<ShapeError>("CatRanks",
                         [] {
                           kiln::cat({f32({2, 3}), f32({3})}, 0);
                         },
                         {"[cat]", "[3]"}),
      expect<ValueError>("CatEmptyList", [] { kiln::cat({}, 0); }, {"[cat]"}),
      expect<ShapeError>("StackShapes",
                         [] {
                           kiln::stack({f32({2, 3}), f32({3, 2})});
                         },
                         {"[stack]", "[2, 3]", "[3, 2]"}),
      expect<ShapeError>("ViewElementCount",
                         [] {
                           f32({2, 3}).view({4});
                         },
                         {"[view]", "6", "[4]"}),
      expect<ShapeError>("ViewIncompatibleStrides",
                         [] {
                           f32({2, 3}).t().view({6});
                         },
                         {"[view]", "[3, 2]", "[6]"}),
      expect<ShapeError>("ViewTwoInferredDims",
                         [] {
                           f32({2, 3}).view({-1, -1});
                         },
                         {"[view]"}),
      expect<ShapeError>("ReshapeElementCount",
                         [] {
                           f32({2, 3}).reshape({5});
                         },
                         {"[reshape]", "6", "[5]"}),
      expect<ShapeError>("ExpandNonSingleton",
                         [] {
                           f32({3, 2}).expand({3, 4});
                         },
                         {"[expand]", "[3, 2]", "[3, 4]"}),
      expect<ShapeError>("ExpandFewerDims",
                         [] {
                           f32({2, 3}).expand({3});
                         },
                         {"[expand]", "[2, 3]", "[3]"}),
      expect<ShapeError>("LayerNormShape",
                         [] {
                           kiln::layer_norm(f32({2, 5}), {4});
                         },
                         {"[layer_norm]", "[4]", "[2, 5]"}),
      expect<ShapeError>("LayerNormWeightShape",
                         [] {
                           kiln::layer_norm(f32({2, 5}), {5}, f32({3}));
                         },
                         {"[layer_norm]", "[5]", "[3]"}),
      expect<ShapeError>("Conv2dChannels",
                         [] {
                           kiln::conv2d(f32({1, 3, 5, 5}), f32({2, 4, 3, 3}));
                         },
                         {"[conv2d]", "[1, 3, 5, 5]", "[2, 4, 3, 3]"}),
      expect<ShapeError>("Conv2dKernelLargerThanInput",
                         [] {
                           kiln::conv2d(f32({1, 1, 2, 2}), f32({1, 1, 3, 3}));
                         },
                         {"[conv2d]"}),
      expect<ShapeError>("Conv2dWeightRank",
                         [] {
                           kiln::conv2d(f32({1, 1, 4, 4}), f32({1, 3, 3}));
                         },
                         {"[conv2d]", "[1, 3, 3]"}),
      expect<ShapeError>("MaxPoolKernelLargerThanInput",
                         [] {
                           kiln::max_pool2d(f32({1, 1, 2, 2}), {3, 3});
                         },
                         {"[max_pool2d]"}),
      expect<ShapeError>("AvgPoolRank",
                         [] {
                           kiln::avg_pool2d(f32({4, 4}), {2, 2});
                         },
                         {"[avg_pool2d]", "[4, 4]"}),
      expect<ValueError>("MaxPoolPaddingOverHalfKernel",
                         [] {
                           kiln::max_pool2d(f32({1, 1, 6, 6}), {2, 2}, {2, 2}, {2, 2});
                         },
                         {"[max_pool2d]"}),
      expect<ShapeError>("SplitSizesSum",
                         [] {
                           kiln::split(f32({10}), std::vector<int64_t>{3, 3});
                         },
                         {"[split]", "6", "10"}),
      expect<ShapeError>("CopyNotBroadcastable",
                         [] {
                           f32({2, 3}).copy_(f32({4}));
                         },
                         {"[2, 3]", "[4]"}),
      expect<ShapeError>("InPlaceOutputCannotBroadcast",
                         [] {
                           f32({3}).add_(f32({2, 3}));
                         },
                         {"[add]", "[3]", "[2, 3]"}),
      expect<ShapeError>("FromVectorCount",
                         [] {
                           kiln::from_vector<float>({1, 2, 3}, {2, 2});
                         },
                         {"[from_vector]", "[2, 2]"}),
      expect<ShapeError>("EmbeddingWeightRank", [] { kiln::embedding(f32({5}), idx64({0})); },
                         {"[embedding]", "[5]"}),
      expect<ShapeError>("IndexSelectIndexRank",
                         [] {
                           kiln::index_select(f32({5, 2}), 0, idx64({0, 1, 2, 3}).view({2, 2}));
                         },
                         {"[index_select]", "[2, 2]"}),
      expect<kiln::Error>("ItemOfManyElements", [] { f32({2}).item(); }, {"[item]", "[2]"}),

      // ---- dims and indices out of range
      expect<IndexError>("SumDim",
                         [] {
                           kiln::sum(f32({2, 3, 4}), {3});
                         },
                         {"[sum]", "3"}),
      expect<IndexError>("MeanNegativeDim",
                         [] {
                           kiln::mean(f32({2, 3}), {-3});
                         },
                         {"[mean]", "-3"}),
      expect<IndexError>("MaxDim",
                         [] {
                           kiln::max(f32({2, 3}), 2);
                         },
                         {"[max]", "2"}),
      expect<IndexError>("ArgmaxDim",
                         [] {
                           kiln::argmax(f32({2, 3}), 2);
                         },
                         {"[argmax]", "2"}),
      expect<ValueError>("SumRepeatedDim",
                         [] {
                           kiln::sum(f32({2, 3}), {1, -1});
                         },
                         {"[sum]"}),
      expect<IndexError>("SoftmaxDim",
                         [] {
                           kiln::softmax(f32({2, 3}), -3);
                         },
                         {"[softmax]", "-3"}),
      expect<IndexError>("LogSoftmaxDim",
                         [] {
                           kiln::log_softmax(f32({2, 3}), 2);
                         },
                         {"[log_softmax]", "2"}),
      expect<IndexError>("TransposeDim",
                         [] {
                           f32({2, 3}).transpose(0, 2);
                         },
                         {"[transpose]", "2"}),
      expect<IndexError>("PermuteDim",
                         [] {
                           f32({2, 3}).permute({0, 2});
                         },
                         {"[permute]", "2"}),
      expect<kiln::Error>("PermuteRepeatedDim",
                          [] {
                            f32({2, 3}).permute({0, 0});
                          },
                          {"[permute]"}),
      expect<kiln::Error>("PermuteWrongLength",
                          [] {
                            f32({2, 3}).permute({0});
                          },
                          {"[permute]"}),
      expect<IndexError>("SelectIndex",
                         [] {
                           f32({2, 3}).select(1, 3);
                         },
                         {"[select]", "3"}),
      expect<IndexError>("SelectNegativeIndex",
                         [] {
                           f32({2, 3}).select(0, -3);
                         },
                         {"[select]", "-3"}),
      expect<IndexError>("SelectDim",
                         [] {
                           f32({2, 3}).select(2, 0);
                         },
                         {"[select]", "2"}),
      expect<IndexError>("SelectZeroDim", [] { f32({}).select(0, 0); }, {"[select]"}),
      expect<IndexError>("SqueezeDim",
                         [] {
                           f32({2, 3}).squeeze(2);
                         },
                         {"[squeeze]", "2"}),
      expect<IndexError>("UnsqueezeDim",
                         [] {
                           f32({2, 3}).unsqueeze(3);
                         },
                         {"[unsqueeze]", "3"}),
      expect<IndexError>("SliceDim",
                         [] {
                           f32({2, 3}).slice(2, 0, 1);
                         },
                         {"[slice]", "2"}),
      expect<IndexError>("NarrowPastTheEnd",
                         [] {
                           f32({2, 3}).narrow(1, 2, 2);
                         },
                         {"[narrow]"}),
      expect<IndexError>("FlattenDims",
                         [] {
                           f32({2, 3}).flatten(0, 5);
                         },
                         {"[flatten]", "5"}),
      expect<IndexError>("CatDim",
                         [] {
                           kiln::cat({f32({2, 3}), f32({2, 3})}, 2);
                         },
                         {"[cat]", "2"}),
      expect<IndexError>("StackDim",
                         [] {
                           kiln::stack({f32({2, 3}), f32({2, 3})}, 4);
                         },
                         {"[stack]", "4"}),
      expect<IndexError>("ChunkDim",
                         [] {
                           kiln::chunk(f32({2, 3}), 2, 2);
                         },
                         {"[chunk]", "2"}),
      expect<IndexError>("IndexSelectDim",
                         [] {
                           kiln::index_select(f32({2, 3}), 2, idx64({0}));
                         },
                         {"[index_select]", "2"}),
      expect<IndexError>("IndexSelectIndexTooLarge",
                         [] {
                           kiln::index_select(f32({5, 2}), 0, idx64({0, 5}));
                         },
                         {"[index_select]", "5"}),
      expect<IndexError>("IndexSelectNegativeIndex",
                         [] {
                           kiln::index_select(f32({5, 2}), 0, idx64({-1}));
                         },
                         {"[index_select]", "-1"}),
      expect<IndexError>("EmbeddingIndexTooLarge",
                         [] {
                           kiln::embedding(f32({11, 4}), idx64({3, 11}));
                         },
                         {"[embedding]", "11"}),

      // ---- dtypes
      expect<DTypeError>("MatmulMixedDTypes",
                         [] {
                           kiln::matmul(f32({2, 3}), typed({3, 2}, DType::Float64));
                         },
                         {"[matmul]", "float32", "float64"}),
      expect<DTypeError>("NegOfBool", [] { kiln::neg(typed({3}, DType::Bool)); },
                         {"[neg]", "bool"}),
      expect<DTypeError>("SubOfBools",
                         [] { kiln::sub(typed({3}, DType::Bool), typed({3}, DType::Bool)); },
                         {"[sub]", "bool"}),
      expect<DTypeError>("WhereConditionNotBool", [] { kiln::where(f32({3}), f32({3}), f32({3})); },
                         {"[where]", "float32"}),
      expect<DTypeError>("IndexSelectFloatIndex",
                         [] {
                           kiln::index_select(f32({5, 2}), 0, f32({2}));
                         },
                         {"[index_select]", "float32"}),
      expect<DTypeError>("EmbeddingFloatIndex",
                         [] {
                           kiln::embedding(f32({5, 2}), f32({2}));
                         },
                         {"[embedding]", "float32"}),
      expect<DTypeError>("LayerNormWeightDType",
                         [] {
                           kiln::layer_norm(f32({2, 5}), {5}, typed({5}, DType::Float64));
                         },
                         {"[layer_norm]", "float32", "float64"}),
      expect<DTypeError>("Conv2dOnIntegers",
                         [] {
                           kiln::conv2d(typed({1, 1, 4, 4}, DType::Int64),
                                        typed({1, 1, 3, 3}, DType::Int64));
                         },
                         {"[conv2d]", "int64"}),
      expect<DTypeError>("InPlaceAddFloatIntoInt",
                         [] {
                           Tensor x = typed({3}, DType::Int32);
                           x.add_(f32({3}));
                         },
                         {"[add]", "float32", "int32"}),
      expect<DTypeError>("InPlaceMulFloatScalarIntoInt",
                         [] {
                           Tensor x = typed({3}, DType::Int64);
                           x.mul_(2.5);
                         },
                         {"[mul]", "int64"}),
      expect<DTypeError>("RandOfIntegers", [] { kiln::rand({3}, DType::Int32); },
                         {"[rand]", "int32"}),
      expect<DTypeError>("RandnOfIntegers", [] { kiln::randn({3}, DType::Int64); },
                         {"[randn]", "int64"}),

      // ---- bad argument values
      expect<ValueError>("ArangeZeroStep", [] { kiln::arange(0, 5, 0); }, {"[arange]"}),
      expect<ValueError>("ArangeWrongSignStep", [] { kiln::arange(0, 5, -1); }, {"[arange]"}),
      expect<ValueError>("ChunkZero", [] { kiln::chunk(f32({4}), 0); }, {"[chunk]", "0"}),
      expect<ValueError>("SplitZeroSize", [] { kiln::split(f32({4}), 0); }, {"[split]", "0"}),
      expect<ValueError>("SliceZeroStep", [] { f32({4}).slice(0, 0, 4, 0); }, {"[slice]", "0"}),
      expect<ValueError>("SliceNegativeStep", [] { f32({4}).slice(0, 0, 4, -1); },
                         {"[slice]", "-1"}),
      expect<ValueError>("ClampWithoutBounds",
                         [] { kiln::clamp(f32({4}), std::nullopt, std::nullopt); }, {"[clamp]"}),
      expect<kiln::Error>("NegativeSize",
                          [] {
                            kiln::empty({2, -1});
                          },
                          {"-1"}),
      expect<ValueError>("ParseDevice", [] { kiln::Device::parse("tpu:0"); }, {"tpu"}),

      // ---- memory
      expect<OutOfMemoryError>("HostOutOfMemory",
                               [] { kiln::empty({int64_t{1} << 50}, DType::Float32); }, {}),
      expect<kiln::Error>("ElementCountOverflow",
                          [] {
                            kiln::empty({int64_t{1} << 40, int64_t{1} << 40});
                          },
                          {}),
  };
  return cases;
}

// The runtime still works after an error: a few ops give right answers.
::testing::AssertionResult runtime_still_works() {
  const Host a = random_host({3, 4}, DType::Float32), b = random_host({4, 2}, DType::Float32);
  const Tensor ta = make(a, DType::Float32), tb = make(b, DType::Float32);
  Host sum(a.sizes);
  for (size_t i = 0; i < a.v.size(); ++i) sum.v[i] = a.v[i] + a.v[i];
  auto r = all_close(kiln::add(ta, ta), sum, tol_pointwise(DType::Float32));
  if (!r) return r;
  Host mm({3, 2});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) mm.at({i, j}) += a.at({i, k}) * b.at({k, j});
  return all_close(kiln::matmul(ta, tb), mm, tol_reduce(DType::Float32));
}

class Errors : public ::testing::TestWithParam<size_t> {};

TEST_P(Errors, ThrowsTheRightTypeWithAClearMessage) {
  EXPECT_TRUE(error_cases()[GetParam()].check());
  EXPECT_TRUE(runtime_still_works()) << "after the error";
}

INSTANTIATE_TEST_SUITE_P(Cases, Errors, ::testing::Range<size_t>(0, error_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return error_cases()[info.param].name;
                         });

// ---- combinations PyTorch accepts that kiln may reject: either the right answer, or
// a DTypeError naming the op (never a crash, a wrong answer or another error type).

template <class F>
::testing::AssertionResult right_or_dtype_error(F&& f, const Host& expected, Tol tol,
                                                const std::string& op) {
  Tensor y;
  try {
    y = f();
  } catch (const DTypeError& e) {
    if (std::string(e.what()).find("[" + op + "]") == std::string::npos)
      return ::testing::AssertionFailure()
             << "DTypeError does not name [" << op << "]: " << e.what();
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << demangled_type(e) << ": " << e.what();
  }
  return all_close(y, expected, tol);
}

TEST(ErrorsOrResults, MatmulOnIntegers) {
  const Host a = random_host({3, 4}, DType::Int32), b = random_host({4, 2}, DType::Int32);
  Host mm({3, 2});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) mm.at({i, j}) += a.at({i, k}) * b.at({k, j});
  EXPECT_TRUE(right_or_dtype_error(
      [&] { return kiln::matmul(make(a, DType::Int32), make(b, DType::Int32)); }, mm, tol_exact(),
      "matmul"));
  EXPECT_TRUE(runtime_still_works());
}

TEST(ErrorsOrResults, UnaryOpsOnBool) {
  const Host h = random_host({6}, DType::Bool);
  const Tensor b = make(h, DType::Bool);
  EXPECT_TRUE(right_or_dtype_error([&] { return kiln::relu(b); }, h, tol_exact(), "relu"));
  EXPECT_TRUE(right_or_dtype_error([&] { return kiln::abs(b); }, h, tol_exact(), "abs"));
  EXPECT_TRUE(right_or_dtype_error([&] { return kiln::exp(b); },
                                   map(h, [](double v) { return std::exp(v); }),
                                   tol_pointwise(DType::Float32), "exp"));
  EXPECT_TRUE(runtime_still_works());
}

TEST(ErrorsOrResults, MaxMinOfBool) {
  const Host h = random_host({4, 5}, DType::Bool);
  Host any({5}), all({5});
  for (int64_t j = 0; j < 5; ++j) {
    all.at({j}) = 1;
    for (int64_t i = 0; i < 4; ++i) {
      any.at({j}) = std::max(any.at({j}), h.at({i, j}));
      all.at({j}) = std::min(all.at({j}), h.at({i, j}));
    }
  }
  EXPECT_TRUE(right_or_dtype_error([&] { return kiln::amax(make(h, DType::Bool), {0}); }, any,
                                   tol_exact(), "max"));
  EXPECT_TRUE(right_or_dtype_error([&] { return kiln::amin(make(h, DType::Bool), {0}); }, all,
                                   tol_exact(), "min"));
  EXPECT_TRUE(runtime_still_works());
}

TEST(ErrorsOrResults, SoftmaxAndPoolingOnIntegers) {
  const Host h = random_host({2, 3}, DType::Int64);
  Host sm(h.sizes);
  for (int64_t i = 0; i < 2; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 3; ++j) s += std::exp(h.at({i, j}));
    for (int64_t j = 0; j < 3; ++j) sm.at({i, j}) = std::exp(h.at({i, j})) / s;
  }
  EXPECT_TRUE(right_or_dtype_error([&] { return kiln::softmax(make(h, DType::Int64), 1); }, sm,
                                   tol_pointwise(DType::Float32), "softmax"));
  const Host p = random_host({1, 1, 2, 2}, DType::Int32);
  EXPECT_TRUE(right_or_dtype_error(
      [&] {
        return kiln::max_pool2d(make(p, DType::Int32), {2, 2});
      },
      Host({1, 1, 1, 1}, {*std::max_element(p.v.begin(), p.v.end())}), tol_exact(), "max_pool2d"));
  EXPECT_TRUE(runtime_still_works());
}

// ---- devices

TEST(DeviceErrors, MixingDevicesOrMissingGpu) {
  if (have_gpu()) {
    const Tensor c = f32({2, 3}), g = f32({2, 3}).cuda();
    EXPECT_TRUE(throws<DeviceError>([&] { kiln::add(c, g); }, {"[add]", "cpu", "cuda:0"}));
    EXPECT_TRUE(throws<DeviceError>([&] { kiln::matmul(c, g.t()); }, {"[matmul]", "cpu", "cuda"}));
    EXPECT_TRUE(throws<DeviceError>([&] { kiln::cat({c, g}); }, {"[cat]", "cpu", "cuda"}));
    EXPECT_TRUE(throws<DeviceError>(
        [&] {
          kiln::where(typed({2, 3}, DType::Bool), c, g);
        },
        {"[where]", "cpu", "cuda"}));
    EXPECT_TRUE(throws<DeviceError>([&] { kiln::index_select(g, 0, idx64({0})); },
                                    {"[index_select]", "cpu", "cuda"}));
    EXPECT_TRUE(throws<DeviceError>([&] { kiln::layer_norm(g, {3}, f32({3})); },
                                    {"[layer_norm]", "cpu", "cuda"}));
    EXPECT_TRUE(throws<DeviceError>([&] { kiln::zeros({2}, kiln::cuda_device(1000)); }, {"1000"}));
  } else {
    EXPECT_TRUE(throws<DeviceError>([] { kiln::zeros({2}, kiln::cuda_device()); }, {"cuda"}));
    EXPECT_TRUE(throws<DeviceError>([] { f32({2}).cuda(); }, {"cuda"}));
    EXPECT_TRUE(throws<DeviceError>([] { kiln::rand({2}, kiln::cuda_device()); }, {"cuda"}));
    EXPECT_TRUE(throws<DeviceError>(
        [] {
          kiln::from_vector<float>({1.f, 2.f}, {2}, kiln::cuda_device());
        },
        {"cuda"}));
  }
  EXPECT_TRUE(runtime_still_works());
}

}  // namespace
}  // namespace kt
