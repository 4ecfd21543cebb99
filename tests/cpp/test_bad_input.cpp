// Bad input, op by op: a table with rows for every op of the registry (ops/ops.def) that
// call it with a wrong dtype, shape, device or dim, with NaN/Inf, with empty tensors and
// with sizes no machine can hold (2^62 elements). Each row expects either a kiln error
// of the right type whose message names the op (and the argument, expected vs actual),
// or the IEEE result, checked against a double-precision reference written here; never
// a crash. After every row the runtime must still compute right answers.
// (test_errors.cpp holds the finer-grained message checks of single error paths.)
#include <cmath>
#include <limits>
#include <map>

#include "ops/dispatch.h"
#include "ops/distributed/collective_ops.h"
#include "ops/registry.h"
#include "reference.h"
#include "runtime/distributed/backends.h"

namespace kt {
namespace {

using kiln::DeviceError;
using kiln::DTypeError;
using kiln::IndexError;
using kiln::OpId;
using kiln::Scalar;
using kiln::ShapeError;
using kiln::ValueError;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kHuge = int64_t{1} << 31;  // kHuge * kHuge = 2^62 elements

struct Row {
  OpId op;
  std::string name;  // the row's test name
  std::function<::testing::AssertionResult()> check;
  bool needs_gpu = false;
};

// ---- row builders

template <class E>
Row error_row(OpId op, std::string row_name, std::function<void()> f,
              std::vector<std::string> subs) {
  return {op, std::move(row_name), [f, subs] { return throws<E>(f, subs); }};
}

// The IEEE result: the op's answer equals the double reference (NaN == NaN, inf == inf).
Row ieee_row(OpId op, std::string row_name, std::function<Tensor()> f, Host expected, DType d,
             Tol tol) {
  return {op, std::move(row_name), [f, expected, d, tol]() -> ::testing::AssertionResult {
            Tensor y;
            try {
              y = f();
            } catch (const std::exception& e) {
              return ::testing::AssertionFailure() << demangled_type(e) << ": " << e.what();
            }
            if (y.dtype() != d)
              return ::testing::AssertionFailure()
                     << "dtype " << name(y.dtype()) << ", expected " << name(d);
            return all_close(y, rounded(expected, d), tol);
          }};
}

// A request for 2^62 elements (or more): a kiln error naming the op, never bad_alloc or a
// crash. The error is OutOfMemoryError for an allocation, ShapeError for a size that
// cannot even be counted.
Row huge_row(OpId op, std::function<void()> f, const std::string& bracket,
             std::string row_name = "Huge") {
  return {op, std::move(row_name), [f, bracket]() -> ::testing::AssertionResult {
            try {
              f();
            } catch (const kiln::Error& e) {
              const std::string msg = e.what();
              if (msg.find(bracket) == std::string::npos)
                return ::testing::AssertionFailure()
                       << demangled_type(e) << " does not name " << bracket << ": " << msg;
              return ::testing::AssertionSuccess();
            } catch (const std::exception& e) {
              return ::testing::AssertionFailure()
                     << "not a kiln error: " << demangled_type(e) << ": " << e.what();
            }
            return ::testing::AssertionFailure() << "no error for a 2^62-element request";
          }};
}

Row meta_row(OpId op, std::string row_name, std::function<Tensor()> f, Dims sizes, DType d) {
  return {op, std::move(row_name), [f, sizes, d]() -> ::testing::AssertionResult {
            try {
              return has_meta(f(), sizes, d);
            } catch (const std::exception& e) {
              return ::testing::AssertionFailure() << demangled_type(e) << ": " << e.what();
            }
          }};
}

// ---- inputs

Tensor f32(const Dims& s) { return make(random_host(s, DType::Float32), DType::Float32); }
Tensor typed(const Dims& s, DType d) { return make(random_host(s, d), d); }
Tensor values(const std::vector<double>& v, DType d = DType::Float32) {
  return make(Host({static_cast<int64_t>(v.size())}, v), d);
}
Tensor idx(std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return kiln::from_vector<int64_t>(v, {n});
}
// 2^62 elements that take no memory: one element broadcast.
Tensor huge(DType d = DType::Float32) { return typed({1, 1}, d).expand({kHuge, kHuge}); }
// [2^31, 1, 1, 2^31]: an image batch whose pooled or convolved output is over 2^62.
Tensor huge4(DType d = DType::Float32) {
  return typed({1, 1, 1, 1}, d).expand({kHuge, 1, 1, kHuge});
}

// The specials every pointwise row runs over.
const std::vector<double>& specials() {
  static const std::vector<double> v = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5};
  return v;
}

std::string bracket(OpId op) { return std::string("[") + kiln::op_name(op) + "]"; }

// ---- the double reference of the pointwise ops

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double ref_unary(OpId op, double x) {
  switch (op) {
    case OpId::Neg:
      return -x;
    case OpId::Abs:
      return std::fabs(x);
    case OpId::Exp:
      return std::exp(x);
    case OpId::Log:
      return std::log(x);
    case OpId::Sqrt:
      return std::sqrt(x);
    case OpId::Rsqrt:
      return 1.0 / std::sqrt(x);
    case OpId::Sin:
      return std::sin(x);
    case OpId::Cos:
      return std::cos(x);
    case OpId::Tanh:
      return std::tanh(x);
    case OpId::Sigmoid:
      return sigmoid(x);
    case OpId::Relu:
      return std::isnan(x) ? x : x > 0 ? x : 0.0;
    case OpId::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case OpId::Silu:
      return x * sigmoid(x);
    case OpId::Reciprocal:
      return 1.0 / x;
    case OpId::Erf:
      return std::erf(x);
    case OpId::Log1p:
      return std::log1p(x);
    default:
      return kNaN;
  }
}

bool is_comparison(OpId op) {
  return op == OpId::Eq || op == OpId::Ne || op == OpId::Lt || op == OpId::Le || op == OpId::Gt ||
         op == OpId::Ge;
}

double ref_binary(OpId op, double a, double b) {
  switch (op) {
    case OpId::Add:
      return a + b;
    case OpId::Sub:
      return a - b;
    case OpId::Mul:
      return a * b;
    case OpId::Div:
      return a / b;
    case OpId::Pow:
      return std::pow(a, b);
    case OpId::Maximum:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    case OpId::Minimum:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
    case OpId::Eq:
      return a == b;
    case OpId::Ne:
      return a != b;
    case OpId::Lt:
      return a < b;
    case OpId::Le:
      return a <= b;
    case OpId::Gt:
      return a > b;
    default:
      return a >= b;
  }
}

Tensor call_binary(OpId op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case OpId::Add:
      return kiln::add(a, b);
    case OpId::Sub:
      return kiln::sub(a, b);
    case OpId::Mul:
      return kiln::mul(a, b);
    case OpId::Div:
      return kiln::div(a, b);
    case OpId::Pow:
      return kiln::pow(a, b);
    case OpId::Maximum:
      return kiln::maximum(a, b);
    case OpId::Minimum:
      return kiln::minimum(a, b);
    case OpId::Eq:
      return kiln::eq(a, b);
    case OpId::Ne:
      return kiln::ne(a, b);
    case OpId::Lt:
      return kiln::lt(a, b);
    case OpId::Le:
      return kiln::le(a, b);
    case OpId::Gt:
      return kiln::gt(a, b);
    default:
      return kiln::ge(a, b);
  }
}

Tensor call_unary(OpId op, const Tensor& x) {
  switch (op) {
    case OpId::Neg:
      return kiln::neg(x);
    case OpId::Abs:
      return kiln::abs(x);
    case OpId::Exp:
      return kiln::exp(x);
    case OpId::Log:
      return kiln::log(x);
    case OpId::Sqrt:
      return kiln::sqrt(x);
    case OpId::Rsqrt:
      return kiln::rsqrt(x);
    case OpId::Sin:
      return kiln::sin(x);
    case OpId::Cos:
      return kiln::cos(x);
    case OpId::Tanh:
      return kiln::tanh(x);
    case OpId::Sigmoid:
      return kiln::sigmoid(x);
    case OpId::Relu:
      return kiln::relu(x);
    case OpId::Gelu:
      return kiln::gelu(x);
    case OpId::Silu:
      return kiln::silu(x);
    case OpId::Reciprocal:
      return kiln::reciprocal(x);
    case OpId::Erf:
      return kiln::erf(x);
    case OpId::Log1p:
      return kiln::log1p(x);
    default:
      return x.to(DType::Float64);  // Cast
  }
}

// ---- rows by op family

void unary_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  if (op == OpId::Cast) {
    rows.push_back(ieee_row(
        op, "NaNInfOverflowToFloat16",
        [] {
          return values({kNaN, kInf, -kInf, 1e6, -1e6, 65504.0, 1e-9}).to(DType::Float16);
        },
        Host({7}, {kNaN, kInf, -kInf, kInf, -kInf, 65504.0, 0.0}), DType::Float16, tol_exact()));
    rows.push_back(ieee_row(
        op, "NaNInfToFloat64",
        [] {
          return values({kNaN, kInf, -kInf, -0.0}).to(DType::Float64);
        },
        Host({4}, {kNaN, kInf, -kInf, 0.0}), DType::Float64, tol_exact()));
    rows.push_back(meta_row(
        op, "Empty",
        [] {
          return f32({0, 3}).to(DType::Int64);
        },
        {0, 3}, DType::Int64));
    rows.push_back(huge_row(
        op, [] { huge().to(DType::Float64); }, "[cast]"));
    return;
  }
  rows.push_back(error_row<DTypeError>(
      op, "BoolInput", [op] { call_unary(op, typed({3}, DType::Bool)); }, {b, "bool"}));
  // Transcendentals at infinities are left to the libm of each path; NaN, signed zeros
  // and the finite specials are IEEE everywhere. silu/gelu at -inf are 0 * inf.
  std::vector<double> xs;
  for (double x : specials()) {
    const bool inf_ok = op != OpId::Silu && op != OpId::Gelu;
    if (std::isinf(x) && !inf_ok) continue;
    xs.push_back(x);
  }
  for (DType d : {DType::Float32, DType::Float64}) {
    Host in({static_cast<int64_t>(xs.size())}, xs);
    rows.push_back(ieee_row(
        op, std::string("NaNInfZeros") + (d == DType::Float32 ? "F32" : "F64"),
        [op, in, d] { return call_unary(op, make(in, d)); },
        map(in, [op](double x) { return ref_unary(op, x); }), d, tol_pointwise(d)));
  }
  if (op == OpId::Neg) {  // the sign of zero is only visible through 1/x
    rows.push_back(ieee_row(
        op, "SignOfZero",
        [] {
          return kiln::reciprocal(kiln::neg(values({0.0, -0.0})));
        },
        Host({2}, {-kInf, kInf}), DType::Float32, tol_exact()));
  }
  if (op == OpId::Relu) {  // relu(-0) is +0 (PyTorch), visible through 1/x
    rows.push_back(ieee_row(
        op, "NegativeZeroGivesPlusZero",
        [] { return kiln::reciprocal(kiln::relu(values({-0.0}))); }, Host({1}, {kInf}),
        DType::Float32, tol_exact()));
  }
  if (op == OpId::Exp) {  // finite up to log(FLT_MAX) = 88.7228
    rows.push_back(ieee_row(
        op, "NearFloat32OverflowStaysFinite",
        [] {
          return kiln::exp(values({88.5, 88.72, 88.73}));
        },
        Host({3}, {std::exp(88.5), std::exp(88.72), kInf}), DType::Float32,
        tol_pointwise(DType::Float32)));
  }
  if (op == OpId::Exp) {
    rows.push_back(ieee_row(
        op, "OverflowToInfFloat16",
        [] {
          return kiln::exp(values({12.0, -20.0}, DType::Float16));
        },
        Host({2}, {kInf, 0.0}), DType::Float16, tol_exact()));
  }
  rows.push_back(meta_row(
      op, "Empty",
      [op] {
        return call_unary(op, f32({0, 3}));
      },
      {0, 3}, DType::Float32));
  rows.push_back(huge_row(
      op, [op] { call_unary(op, huge()); }, b));
}

void binary_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  rows.push_back(error_row<ShapeError>(op, "ShapesDoNotBroadcast",
                                       [op] {
                                         call_binary(op, f32({2, 3}), f32({4}));
                                       },
                                       {b, "[2, 3]", "[4]"}));
  if (op == OpId::Sub || op == OpId::Pow) {
    rows.push_back(error_row<DTypeError>(
        op, "BoolOperands",
        [op] { call_binary(op, typed({3}, DType::Bool), typed({3}, DType::Bool)); }, {b, "bool"}));
  }
  const std::vector<double>& s = specials();
  const auto n = static_cast<int64_t>(s.size());
  Host a({n * n}), c({n * n});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      a.v[static_cast<size_t>(i * n + j)] = s[static_cast<size_t>(i)];
      c.v[static_cast<size_t>(i * n + j)] = s[static_cast<size_t>(j)];
    }
  }
  const Host expected = map2(a, c, [op](double x, double y) { return ref_binary(op, x, y); });
  for (DType d : {DType::Float32, DType::Float64}) {
    const DType out = is_comparison(op) ? DType::Bool : d;
    rows.push_back(ieee_row(
        op, std::string("AllPairsOfSpecials") + (d == DType::Float32 ? "F32" : "F64"),
        [op, a, c, d] { return call_binary(op, make(a, d), make(c, d)); }, expected, out,
        is_comparison(op) ? tol_exact() : tol_pointwise(d)));
  }
  if (op == OpId::Maximum || op == OpId::Minimum) {  // IEEE 754-2019: max(+0, -0) = +0
    const double z = op == OpId::Maximum ? kInf : -kInf;
    rows.push_back(ieee_row(
        op, "SignedZeros",
        [op] {
          return kiln::reciprocal(call_binary(op, values({0.0, -0.0}), values({-0.0, 0.0})));
        },
        Host({2}, {z, z}), DType::Float32, tol_exact()));
  }
  if (op == OpId::Div) {
    rows.push_back(ieee_row(
        op, "IntegersByZero",
        [] {
          return kiln::div(values({1, -1, 0, 7}, DType::Int32), values({0, 0, 0, 2}, DType::Int32));
        },
        Host({4}, {kInf, -kInf, kNaN, 3.5}), DType::Float32, tol_exact()));
  }
  if (op == OpId::Add) {
    rows.push_back(error_row<DTypeError>(op, "InPlaceFloatIntoInt",
                                         [] {
                                           Tensor x = typed({3}, DType::Int32);
                                           x.add_(f32({3}));
                                         },
                                         {b, "float32", "int32"}));
  }
  rows.push_back(meta_row(
      op, "EmptyBroadcast",
      [op] {
        return call_binary(op, f32({0, 3}), f32({3}));
      },
      {0, 3}, is_comparison(op) ? DType::Bool : DType::Float32));
  rows.push_back(huge_row(
      op, [op] { call_binary(op, huge(), f32({1})); }, b));
}

void where_clamp_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  if (op == OpId::Where) {
    rows.push_back(error_row<DTypeError>(
        op, "ConditionNotBool", [] { kiln::where(f32({3}), f32({3}), f32({3})); }, {b, "float32"}));
    rows.push_back(error_row<ShapeError>(
        op, "Shapes", [] { kiln::where(typed({2}, DType::Bool), f32({3}), f32({3})); },
        {b, "[2]", "[3]"}));
    rows.push_back(ieee_row(
        op, "NaNInfPassThrough",
        [] {
          return kiln::where(values({1, 0, 1, 0}, DType::Bool), values({kNaN, 1, kInf, 2}),
                             values({5, -kInf, 6, kNaN}));
        },
        Host({4}, {kNaN, -kInf, kInf, kNaN}), DType::Float32, tol_exact()));
    rows.push_back(meta_row(
        op, "Empty", [] { return kiln::where(typed({0}, DType::Bool), f32({1}), f32({0})); }, {0},
        DType::Float32));
    rows.push_back(huge_row(
        op, [] { kiln::where(typed({1}, DType::Bool), huge(), f32({1})); }, b));
    return;
  }
  rows.push_back(error_row<ValueError>(
      op, "NoBounds", [] { kiln::clamp(f32({3}), std::nullopt, std::nullopt); }, {b}));
  rows.push_back(error_row<DTypeError>(
      op, "BoolInput", [] { kiln::clamp(typed({3}, DType::Bool), 0, 1); }, {b, "bool"}));
  rows.push_back(ieee_row(
      op, "NaNPassesInfClamps",
      [] {
        return kiln::clamp(values({kNaN, kInf, -kInf, 0.5, -0.0}), -1.0, 1.0);
      },
      Host({5}, {kNaN, 1, -1, 0.5, 0.0}), DType::Float32, tol_exact()));
  rows.push_back(meta_row(
      op, "Empty",
      [] {
        return kiln::clamp(f32({2, 0}), -1.0, 1.0);
      },
      {2, 0}, DType::Float32));
  rows.push_back(huge_row(
      op, [] { kiln::clamp(huge(), -1.0, 1.0); }, b));
}

Tensor call_reduce(OpId op, const Tensor& x, const Dims& dims, bool keepdim = false) {
  switch (op) {
    case OpId::Sum:
      return kiln::sum(x, dims, keepdim);
    case OpId::Mean:
      return kiln::mean(x, dims, keepdim);
    case OpId::Max:
      return kiln::amax(x, dims, keepdim);
    case OpId::Min:
      return kiln::amin(x, dims, keepdim);
    case OpId::Argmax:
      return kiln::argmax(x, dims.empty() ? std::nullopt : std::optional<int64_t>(dims[0]),
                          keepdim);
    case OpId::LogSumExp:
      return kiln::logsumexp(x, dims, keepdim);
    default:
      return kiln::var(x, dims, 1, keepdim);
  }
}

void reduce_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                       [op] {
                                         call_reduce(op, f32({2, 3}), {2});
                                       },
                                       {b, "2"}));
  if (op != OpId::Argmax) {
    rows.push_back(error_row<ValueError>(op, "RepeatedDim",
                                         [op] {
                                           call_reduce(op, f32({2, 3}), {1, -1});
                                         },
                                         {b}));
  }
  if (op != OpId::Sum && op != OpId::Mean) {
    rows.push_back(error_row<DTypeError>(
        op, "BoolInput", [op] { call_reduce(op, typed({4}, DType::Bool), {}); }, {b, "bool"}));
  }
  // IEEE: NaN wins max/min/argmax and poisons sums; inf - inf is NaN.
  const Host x({2, 3}, {1.0, kNaN, 3.0, 1.0, kInf, -2.0});
  Host expected;
  switch (op) {
    case OpId::Sum:
      expected = Host({2}, {kNaN, kInf});
      break;
    case OpId::Mean:
      expected = Host({2}, {kNaN, kInf});
      break;
    case OpId::Max:
      expected = Host({2}, {kNaN, kInf});
      break;
    case OpId::Min:
      expected = Host({2}, {kNaN, -2.0});
      break;
    case OpId::Argmax:
      expected = Host({2}, {1, 1});
      break;
    case OpId::LogSumExp:  // an infinite maximum is not subtracted (PyTorch): inf, not NaN
      expected = Host({2}, {kNaN, kInf});
      break;
    default:  // var
      expected = Host({2}, {kNaN, kNaN});
      break;
  }
  const DType out = op == OpId::Argmax ? DType::Int64 : DType::Float32;
  rows.push_back(ieee_row(
      op, "NaNInfRows", [op, x] { return call_reduce(op, make(x, DType::Float32), {1}); }, expected,
      out, op == OpId::Argmax ? tol_exact() : tol_reduce(DType::Float32)));
  // Empty: sums are 0, means and variances NaN (0/0); max, min and argmax have no identity.
  if (op == OpId::Max || op == OpId::Min || op == OpId::Argmax) {
    rows.push_back(error_row<ShapeError>(op, "EmptyHasNoIdentity",
                                         [op] {
                                           call_reduce(op, f32({0, 3}), {0});
                                         },
                                         {b, "[0, 3]"}));
  } else {
    const double e = op == OpId::Sum ? 0.0 : op == OpId::LogSumExp ? -kInf : kNaN;
    rows.push_back(ieee_row(
        op, "EmptyReduction",
        [op] {
          return call_reduce(op, f32({0, 3}), {0});
        },
        Host({3}, {e, e, e}), DType::Float32, tol_exact()));
  }
  rows.push_back(meta_row(
      op, "EmptyKeptDims",
      [op] {
        return call_reduce(op, f32({0, 3}), {1}, true);
      },
      {0, 1}, out));
  // The output alone is 2^61 elements (2^63 bytes of float32).
  rows.push_back(huge_row(
      op,
      [op] {
        call_reduce(op, typed({1, 1, 2}, DType::Float32).expand({kHuge, kHuge / 2, 2}), {2});
      },
      b));
}

Tensor call_softmax(OpId op, const Tensor& x, int64_t dim) {
  return op == OpId::Softmax ? kiln::softmax(x, dim) : kiln::log_softmax(x, dim);
}

void softmax_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                       [op] {
                                         call_softmax(op, f32({2, 3}), 2);
                                       },
                                       {b, "2"}));
  rows.push_back(error_row<DTypeError>(
      op, "BoolInput", [op] { call_softmax(op, typed({3}, DType::Bool), 0); }, {b, "bool"}));
  // Rows: [-inf, 0] (one certain class), [NaN, 1] (NaN spreads), [-inf, -inf] (0/0).
  const Host x({3, 2}, {-kInf, 0.0, kNaN, 1.0, -kInf, -kInf});
  const Host expected = op == OpId::Softmax ? Host({3, 2}, {0.0, 1.0, kNaN, kNaN, kNaN, kNaN})
                                            : Host({3, 2}, {-kInf, 0.0, kNaN, kNaN, kNaN, kNaN});
  rows.push_back(ieee_row(
      op, "NaNInfRows", [op, x] { return call_softmax(op, make(x, DType::Float32), 1); }, expected,
      DType::Float32, tol_pointwise(DType::Float32)));
  rows.push_back(meta_row(
      op, "EmptyRows",
      [op] {
        return call_softmax(op, f32({0, 3}), 1);
      },
      {0, 3}, DType::Float32));
  rows.push_back(meta_row(
      op, "EmptyColumns",
      [op] {
        return call_softmax(op, f32({3, 0}), 1);
      },
      {3, 0}, DType::Float32));
  rows.push_back(huge_row(
      op, [op] { call_softmax(op, huge(), 1); }, b));
}

void attention_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = std::string("[") + kiln::op_name(op) + "]";
  const Tensor q = f32({2, 3, 5, 8}), kv = f32({2, 3, 6, 8});
  if (op == OpId::Attention) {
    rows.push_back(error_row<ShapeError>(op, "KeyFeatures",
                                         [] {
                                           kiln::scaled_dot_product_attention(f32({2, 3, 5, 8}),
                                                                              f32({2, 3, 6, 7}),
                                                                              f32({2, 3, 6, 8}));
                                         },
                                         {b, "key", "[2, 3, 6, 8]", "[2, 3, 6, 7]"}));
    rows.push_back(error_row<DTypeError>(op, "IntegerQuery",
                                         [] {
                                           const Tensor i = typed({2, 5, 8}, DType::Int32);
                                           kiln::scaled_dot_product_attention(i, i, i);
                                         },
                                         {b, "query", "int32"}));
    return;
  }
  // attention_output / attention_backward, called directly with a wrong packed or grad.
  const Tensor packed =
      kiln::dispatch(kiln::OpCall{OpId::Attention, {q, kv, kv}, {Scalar(0.5)}, {}});
  if (op == OpId::AttentionOutput) {
    rows.push_back(error_row<ShapeError>(
        op, "PackedShape",
        [=] {
          kiln::dispatch(kiln::OpCall{op, {f32({2, 3, 5, 8}), q, kv, kv}, {Scalar(0.5)}, {}});
        },
        {b, "packed", kiln::dims_str(packed.sizes()), "[2, 3, 5, 8]"}));
    rows.push_back(
        error_row<ValueError>(op, "NoScale",
                              [=] {
                                kiln::dispatch(kiln::OpCall{op, {packed, q, kv, kv}, {}, {}});
                              },
                              {b, "scale", "got 0"}));
    return;
  }
  rows.push_back(error_row<ShapeError>(
      op, "GradShape",
      [=] {
        kiln::dispatch(kiln::OpCall{op, {f32({2, 3, 5, 7}), packed, q, kv, kv}, {Scalar(0.5)}, {}});
      },
      {b, "grad", "[2, 3, 5, 8]", "[2, 3, 5, 7]"}));
  rows.push_back(
      error_row<ValueError>(op, "TooFewInputs",
                            [=] {
                              kiln::dispatch(kiln::OpCall{op, {packed, q, kv}, {Scalar(0.5)}, {}});
                            },
                            {b, "expected 5 or 6 tensor arguments, got 3"}));
}

void lstm_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = std::string("[") + kiln::op_name(op) + "]";
  // T 3, B 2, H 4: xw [3, 2, 16], h0 and c0 [2, 4], w_hh [16, 4]
  const Tensor xw = f32({3, 2, 16}), h = f32({2, 4}), w = f32({16, 4});
  if (op == OpId::LstmLayer) {
    rows.push_back(error_row<ShapeError>(op, "WeightShape",
                                         [=] {
                                           kiln::lstm_layer(xw, h, h, f32({16, 5}), false);
                                         },
                                         {b, "w_hh", "[16, 4]", "[16, 5]"}));
    rows.push_back(error_row<ShapeError>(op, "GateWidth",
                                         [=] {
                                           kiln::lstm_layer(f32({3, 2, 12}), h, h, w, false);
                                         },
                                         {b, "xw", "[3, 2, 16]", "[3, 2, 12]"}));
    rows.push_back(error_row<DTypeError>(op, "IntegerInput",
                                         [=] {
                                           const Tensor i = typed({3, 2, 16}, DType::Int32);
                                           kiln::lstm_layer(i, h, h, w, false);
                                         },
                                         {b, "xw", "float32 or float64", "int32"}));
    rows.push_back(
        error_row<DTypeError>(op, "StateDType",
                              [=] {
                                kiln::lstm_layer(xw, h, typed({2, 4}, DType::Float64), w, false);
                              },
                              {b, "c0", "float32", "float64"}));
    return;
  }
  const Tensor packed = kiln::dispatch(kiln::OpCall{OpId::LstmLayer, {xw, h, h, w}, {}, {}});
  if (op == OpId::LstmOutput) {
    rows.push_back(
        error_row<ShapeError>(op, "PackedShape",
                              [=] {
                                kiln::dispatch(kiln::OpCall{op, {f32({7}), xw, h, h, w}, {}, {}});
                              },
                              {b, "packed", kiln::dims_str(packed.sizes()), "[7]"}));
    rows.push_back(error_row<DTypeError>(
        op, "WeightDType",
        [=] {
          kiln::dispatch(
              kiln::OpCall{op, {packed, xw, h, h, typed({16, 4}, DType::Float64)}, {}, {}});
        },
        {b, "w_hh", "float32", "float64"}));
    return;
  }
  rows.push_back(error_row<ShapeError>(
      op, "GradShape",
      [=] {
        kiln::dispatch(kiln::OpCall{op, {f32({4, 2, 5}), packed, h, h, w}, {}, {}});
      },
      {b, "grad_y", "[T + 1, 2, 4]", "[4, 2, 5]"}));
  rows.push_back(error_row<ValueError>(
      op, "TooFewInputs",
      [=] {
        kiln::dispatch(kiln::OpCall{op, {f32({4, 2, 4}), packed, h, h}, {}, {}});
      },
      {b, "expected 5 tensor arguments, got 4"}));
}

void layer_norm_rows(std::vector<Row>& rows) {
  const OpId op = OpId::LayerNorm;
  const std::string b = "[layer_norm]";
  rows.push_back(error_row<DTypeError>(op, "IntegerInput",
                                       [] {
                                         kiln::layer_norm(typed({2, 4}, DType::Int32), {4});
                                       },
                                       {b, "int32"}));
  rows.push_back(error_row<ShapeError>(op, "NormalizedShape",
                                       [] {
                                         kiln::layer_norm(f32({2, 5}), {4});
                                       },
                                       {b, "[4]", "[2, 5]"}));
  rows.push_back(error_row<ShapeError>(op, "WeightShape",
                                       [] {
                                         kiln::layer_norm(f32({2, 5}), {5}, f32({3}));
                                       },
                                       {b, "[5]", "[3]"}));
  rows.push_back(
      error_row<DTypeError>(op, "WeightDType",
                            [] {
                              kiln::layer_norm(f32({2, 5}), {5}, typed({5}, DType::Float64));
                            },
                            {b, "float32", "float64"}));
  // A constant row has variance 0: (x - mean) / sqrt(0 + eps) = 0. NaN spreads over its row.
  rows.push_back(ieee_row(
      op, "ConstantAndNaNRows",
      [] {
        return kiln::layer_norm(make(Host({2, 3}, {2, 2, 2, 1, kNaN, 3}), DType::Float32), {3});
      },
      Host({2, 3}, {0, 0, 0, kNaN, kNaN, kNaN}), DType::Float32, tol_pointwise(DType::Float32)));
  rows.push_back(meta_row(
      op, "EmptyBatch",
      [] {
        return kiln::layer_norm(f32({0, 4}), {4});
      },
      {0, 4}, DType::Float32));
  rows.push_back(huge_row(
      op, [] { kiln::layer_norm(huge(), {kHuge}); }, b));
}

void matmul_rows(OpId op, std::vector<Row>& rows) {
  const bool linear = op == OpId::Linear;
  const std::string b = bracket(op);
  auto call = [linear](const Tensor& x, const Tensor& w) {
    return linear ? kiln::linear(x, w) : kiln::matmul(x, w);
  };
  rows.push_back(
      error_row<DTypeError>(op, "IntegerOperands",
                            [call] {
                              call(typed({2, 3}, DType::Int32), typed({3, 3}, DType::Int32));
                            },
                            {b, "int32"}));
  rows.push_back(error_row<DTypeError>(op, "MixedFloatDTypes",
                                       [call] {
                                         call(f32({2, 3}), typed({3, 3}, DType::Float64));
                                       },
                                       {b, "float32", "float64"}));
  rows.push_back(error_row<ShapeError>(op, "InnerSizes",
                                       [call] {
                                         call(f32({2, 3}), f32({4, 5}));
                                       },
                                       {b, "[2, 3]", "[4, 5]"}));
  rows.push_back(error_row<ShapeError>(op, "ZeroDim", [call] { call(f32({}), f32({3, 3})); }, {b}));
  // inf * 0 is NaN inside a dot product; NaN spreads; a finite row stays finite.
  const Host a({2, 2}, {kInf, 1.0, 2.0, 3.0}), w({2, 2}, {0.0, 1.0, 1.0, kNaN});
  Host expected({2, 2});
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 2; ++k) s += a.at({i, k}) * (linear ? w.at({j, k}) : w.at({k, j}));
      expected.at({i, j}) = s;
    }
  }
  rows.push_back(ieee_row(
      op, "NaNInfInDotProducts",
      [call, a, w] { return call(make(a, DType::Float32), make(w, DType::Float32)); }, expected,
      DType::Float32, tol_reduce(DType::Float32)));
  // An empty inner dim sums nothing: zeros, never uninitialized memory.
  rows.push_back(ieee_row(
      op, "EmptyInnerDimIsZeros",
      [call, linear] {
        return call(f32({2, 0}), linear ? f32({3, 0}) : f32({0, 3}));
      },
      Host({2, 3}), DType::Float32, tol_exact()));
  rows.push_back(meta_row(
      op, "EmptyBatch",
      [call] {
        return call(f32({0, 3}), f32({3, 3}));
      },
      {0, 3}, DType::Float32));
  rows.push_back(huge_row(
      op,
      [call] {
        call(typed({1, 1}, DType::Float32).expand({kHuge, 1}), f32({1, 1}).expand({1, kHuge}));
      },
      b));
  if (linear) {
    rows.push_back(error_row<ShapeError>(op, "BiasShape",
                                         [] {
                                           kiln::linear(f32({5, 3}), f32({4, 3}), f32({3}));
                                         },
                                         {b, "[4]", "[3]"}));
    rows.push_back(ieee_row(
        op, "NoFeaturesGivesTheBias",
        [] {
          return kiln::linear(f32({2, 0}), f32({3, 0}), values({1, kNaN, -kInf}));
        },
        Host({2, 3}, {1, kNaN, -kInf, 1, kNaN, -kInf}), DType::Float32, tol_exact()));
  }
}

// max_pool2d_backward (grad, x): grad must have x's pooled shape and x's dtype; the
// first NaN of a window takes its gradient.
void pool_backward_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  auto call = [op](const Tensor& grad, const Tensor& x) {
    kiln::OpCall c{op, {grad, x}, {}, {}};
    c.attrs.kernel[0] = c.attrs.kernel[1] = c.attrs.stride[0] = c.attrs.stride[1] = 2;
    return kiln::dispatch(c);
  };
  rows.push_back(error_row<ShapeError>(op, "GradShape",
                                       [call] {
                                         call(f32({1, 1, 3, 2}), f32({1, 1, 4, 4}));
                                       },
                                       {b, "[1, 1, 2, 2]", "[1, 1, 3, 2]"}));
  rows.push_back(
      error_row<ValueError>(op, "GradDType",
                            [call] {
                              call(typed({1, 1, 2, 2}, DType::Float64), f32({1, 1, 4, 4}));
                            },
                            {b, "float64", "float32"}));
  rows.push_back(ieee_row(
      op, "FirstNaNTakesTheGradient",
      [call] {
        return call(make(Host({1, 1, 1, 1}, {5}), DType::Float32),
                    make(Host({1, 1, 2, 2}, {1, kNaN, kNaN, kInf}), DType::Float32));
      },
      Host({1, 1, 2, 2}, {0, 5, 0, 0}), DType::Float32, tol_exact()));
}

void conv_pool_rows(OpId op, std::vector<Row>& rows) {
  if (op == OpId::MaxPool2dBackward) return pool_backward_rows(op, rows);
  const std::string b = bracket(op);
  auto call = [op](const Tensor& x) {
    switch (op) {
      case OpId::Conv2d:
        return kiln::conv2d(x, f32({2, x.dim() >= 3 ? x.size(-3) : 1, 1, 1}), {}, {1, 1}, {1, 1});
      case OpId::MaxPool2d:
        return kiln::max_pool2d(x, {2, 2}, {1, 1}, {1, 1});
      case OpId::AvgPool2d:
        return kiln::avg_pool2d(x, {2, 2}, {1, 1}, {1, 1});
      case OpId::Im2Col:
        return kiln::im2col(x, {2, 2}, {1, 1}, {1, 1});
      default:  // col2im of a [N, C*4, L] input for a 3x3 image
        return kiln::col2im(x, {3, 3}, {2, 2}, {1, 1}, {0, 0});
    }
  };
  const bool col2im = op == OpId::Col2Im;
  rows.push_back(
      error_row<DTypeError>(op, "IntegerInput",
                            [call, col2im] {
                              call(typed(col2im ? Dims{1, 4, 4} : Dims{1, 1, 4, 4}, DType::Int32));
                            },
                            {b, "int32"}));
  rows.push_back(error_row<ShapeError>(op, "WrongRank",
                                       [call] {
                                         call(f32({4, 4}));
                                       },
                                       {b, "[4, 4]"}));
  if (col2im) {
    rows.push_back(error_row<ShapeError>(op, "PatchesDoNotMatch",
                                         [call] {
                                           call(f32({1, 4, 5}));
                                         },
                                         {b, "[1, 4, 5]"}));
    rows.push_back(meta_row(
        op, "EmptyBatch",
        [call] {
          return call(f32({0, 4, 4}));
        },
        {0, 1, 3, 3}, DType::Float32));
    rows.push_back(huge_row(
        op,
        [] {
          kiln::col2im(typed({1, 1, 1}, DType::Float32).expand({1, 1, int64_t{1} << 62}),
                       {kHuge, kHuge}, {1, 1});
        },
        b));
    return;
  }
  // Padding cannot make up an empty image (it once divided by zero in avg_pool2d).
  rows.push_back(error_row<ShapeError>(op, "ZeroSizeImageWithPadding",
                                       [call] {
                                         call(f32({1, 1, 0, 0}));
                                       },
                                       {b, "0"}));
  rows.push_back(error_row<ShapeError>(op, "KernelLargerThanInput",
                                       [op] {
                                         if (op == OpId::Conv2d)
                                           kiln::conv2d(f32({1, 1, 2, 2}), f32({1, 1, 3, 3}));
                                         else if (op == OpId::Im2Col)
                                           kiln::im2col(f32({1, 1, 2, 2}), {3, 3});
                                         else if (op == OpId::MaxPool2d)
                                           kiln::max_pool2d(f32({1, 1, 2, 2}), {3, 3});
                                         else
                                           kiln::avg_pool2d(f32({1, 1, 2, 2}), {3, 3});
                                       },
                                       {b}));
  if (op == OpId::Conv2d) {
    rows.push_back(error_row<ShapeError>(op, "Channels",
                                         [] {
                                           kiln::conv2d(f32({1, 3, 5, 5}), f32({2, 4, 3, 3}));
                                         },
                                         {b, "[1, 3, 5, 5]", "[2, 4, 3, 3]"}));
  } else if (op != OpId::Im2Col) {
    rows.push_back(error_row<ValueError>(op, "PaddingOverHalfTheKernel",
                                         [op] {
                                           Tensor x = f32({1, 1, 6, 6});
                                           op == OpId::MaxPool2d
                                               ? kiln::max_pool2d(x, {2, 2}, {2, 2}, {2, 2})
                                               : kiln::avg_pool2d(x, {2, 2}, {2, 2}, {2, 2});
                                         },
                                         {b}));
  }
  if (op == OpId::MaxPool2d) {
    rows.push_back(ieee_row(
        op, "NaNWinsInfStays",
        [] {
          return kiln::max_pool2d(make(Host({1, 2, 2}, {1, kNaN, kInf, 0}), DType::Float32),
                                  {1, 2});
        },
        Host({1, 2, 1}, {kNaN, kInf}), DType::Float32, tol_exact()));
  }
  rows.push_back(meta_row(
      op, "EmptyBatch",
      [call] {
        return call(f32({0, 1, 3, 3}));
      },
      op == OpId::Conv2d   ? Dims{0, 2, 5, 5}
      : op == OpId::Im2Col ? Dims{0, 4, 16}
                           : Dims{0, 1, 4, 4},
      DType::Float32));
  rows.push_back(huge_row(
      op, [call] { call(huge4()); }, b));
}

void cat_index_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  if (op == OpId::Cat) {
    rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                         [] {
                                           kiln::cat({f32({2, 3}), f32({2, 3})}, 2);
                                         },
                                         {b, "2"}));
    rows.push_back(error_row<ShapeError>(op, "Sizes",
                                         [] {
                                           kiln::cat({f32({2, 3}), f32({2, 4})}, 0);
                                         },
                                         {b, "[2, 3]", "[2, 4]"}));
    rows.push_back(error_row<ValueError>(op, "EmptyList", [] { kiln::cat({}, 0); }, {b}));
    rows.push_back(error_row<ShapeError>(op, "ZeroDimInput",
                                         [] {
                                           kiln::cat({f32({}), f32({})}, 0);
                                         },
                                         {b}));
    rows.push_back(ieee_row(
        op, "NaNInfCopiedAndPromoted",
        [] {
          return kiln::cat({values({kNaN, kInf}), values({-kInf}, DType::Float64)});
        },
        Host({3}, {kNaN, kInf, -kInf}), DType::Float64, tol_exact()));
    rows.push_back(meta_row(
        op, "EmptyParts",
        [] {
          return kiln::cat({f32({0, 3}), f32({2, 3}), f32({0, 3})});
        },
        {2, 3}, DType::Float32));
    rows.push_back(huge_row(
        op,
        [] {
          kiln::cat({huge(), huge()}, 0);
        },
        b));
    return;
  }
  rows.push_back(error_row<DTypeError>(op, "FloatIndex",
                                       [] {
                                         kiln::index_select(f32({5, 2}), 0, f32({2}));
                                       },
                                       {b, "float32"}));
  rows.push_back(
      error_row<ShapeError>(op, "IndexRank",
                            [] {
                              kiln::index_select(f32({5, 2}), 0, idx({0, 1, 2, 3}).view({2, 2}));
                            },
                            {b, "[2, 2]"}));
  rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                       [] {
                                         kiln::index_select(f32({2, 3}), 2, idx({0}));
                                       },
                                       {b, "2"}));
  rows.push_back(error_row<IndexError>(op, "IndexTooLarge",
                                       [] {
                                         kiln::index_select(f32({5, 2}), 0, idx({0, 5}));
                                       },
                                       {b, "5"}));
  rows.push_back(error_row<IndexError>(op, "NegativeIndex",
                                       [] {
                                         kiln::index_select(f32({5, 2}), 0, idx({-1}));
                                       },
                                       {b, "-1"}));
  rows.push_back(error_row<IndexError>(op, "AnyIndexOfAnEmptyDim",
                                       [] {
                                         kiln::index_select(f32({0, 2}), 0, idx({0}));
                                       },
                                       {b, "0"}));
  rows.push_back(error_row<ShapeError>(op, "ZeroDimInputEmptyIndex",
                                       [] { kiln::index_select(f32({}), 0, idx({})); },
                                       {b, "0-dim", "got 0"}));
  rows.push_back(ieee_row(
      op, "NaNInfGathered",
      [] {
        return kiln::index_select(values({kNaN, kInf, -kInf}), 0, idx({2, 0, 1, 0}));
      },
      Host({4}, {-kInf, kNaN, kInf, kNaN}), DType::Float32, tol_exact()));
  rows.push_back(meta_row(
      op, "EmptyIndex",
      [] {
        return kiln::index_select(f32({5, 2}), 0, idx({}));
      },
      {0, 2}, DType::Float32));
  rows.push_back(huge_row(
      op, [] { kiln::index_select(f32({3}), 0, idx({0}).expand({int64_t{1} << 62})); }, b));
}

void device_rows(OpId op, std::vector<Row>& rows) {
  // Without a GPU: asking for one is a DeviceError naming the op. With one: mixing a CUDA
  // tensor with a CPU tensor is a DeviceError naming both devices.
  if (op == OpId::ToDevice) {
    rows.push_back({op, "MissingOrBadGpu", [] {
                      const kiln::Device dev = kiln::cuda_device(have_gpu() ? 1000 : 0);
                      return throws<DeviceError>([dev] { f32({2}).to(dev); }, {"cuda"});
                    }});
    rows.push_back(meta_row(
        op, "EmptyToCpu",
        [] {
          return f32({0, 2}).to(kiln::kCPU);
        },
        {0, 2}, DType::Float32));
    return;
  }
  const kiln::OpFamily fam = kiln::op_info(op).family;
  if (fam == kiln::OpFamily::Factory || fam == kiln::OpFamily::Random) {
    rows.push_back({op, "MissingOrBadGpu", [op] {
                      auto f = [op](kiln::Device dev) {
                        if (op == OpId::Empty) kiln::empty({2}, dev);
                        if (op == OpId::Full) kiln::full({2}, 1.0, dev);
                        if (op == OpId::Arange) kiln::arange(0, 3, 1, dev);
                        if (op == OpId::Rand) kiln::rand({2}, dev);
                        if (op == OpId::Randn) kiln::randn({2}, dev);
                      };
                      const kiln::Device dev = kiln::cuda_device(have_gpu() ? 1000 : 0);
                      return throws<DeviceError>([&] { f(dev); }, {"cuda"});
                    }});
    return;
  }
  std::function<void(const Tensor&, const Tensor&)> mixed;
  switch (fam) {
    case kiln::OpFamily::Binary:
      mixed = [op](const Tensor& c, const Tensor& g) { call_binary(op, c, g); };
      break;
    case kiln::OpFamily::Where:
      mixed = [](const Tensor& c, const Tensor& g) { kiln::where(g > 0, c, g); };
      break;
    case kiln::OpFamily::Matmul:
      mixed = [](const Tensor& c, const Tensor& g) { kiln::matmul(c, g); };
      break;
    case kiln::OpFamily::Linear:
      mixed = [](const Tensor& c, const Tensor& g) { kiln::linear(c, g); };
      break;
    case kiln::OpFamily::LayerNorm:
      mixed = [](const Tensor& c, const Tensor& g) { kiln::layer_norm(c, {3}, g.select(0, 0)); };
      break;
    case kiln::OpFamily::Cat:
      mixed = [](const Tensor& c, const Tensor& g) { kiln::cat({c, g}); };
      break;
    case kiln::OpFamily::IndexSelect:
      mixed = [](const Tensor& c, const Tensor& g) { kiln::index_select(g, 0, idx({0})); };
      break;
    case kiln::OpFamily::Gather:
    case kiln::OpFamily::Scatter:
      mixed = [op](const Tensor& c, const Tensor& g) {
        const Tensor index = idx({0, 1, 2}).view({3, 1});
        if (op == OpId::Gather) kiln::gather(g, 0, index);
        if (op == OpId::Scatter) kiln::scatter(g, 0, index, c.narrow(1, 0, 1));
        if (op == OpId::ScatterAdd) kiln::scatter_add(g, 0, index, c.narrow(1, 0, 1));
        if (op == OpId::IndexAdd) kiln::index_add(g, 0, idx({0, 1, 2}), c);
      };
      break;
    case kiln::OpFamily::Conv2d:
      mixed = [](const Tensor& c, const Tensor& g) {
        kiln::conv2d(c.view({1, 1, 3, 3}), g.view({1, 1, 3, 3}));
      };
      break;
    default:
      return;  // one tensor input: nothing to mix
  }
  const std::string b = bracket(op);
  rows.push_back({op, "MixedCpuAndCuda",
                  [mixed, b] {
                    const Tensor c = f32({3, 3}), g = f32({3, 3}).cuda();
                    return throws<DeviceError>([&] { mixed(c, g); }, {b, "cpu", "cuda"});
                  },
                  true});
}

void factory_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  const Dims too_many = {int64_t{1} << 62};
  const Dims overflow = {int64_t{1} << 40, int64_t{1} << 40};
  auto make_sized = [op](const Dims& sizes, DType d) {
    if (op == OpId::Empty) return kiln::empty(sizes, d);
    if (op == OpId::Full) return kiln::full(sizes, 2.5, d);
    if (op == OpId::Rand) return kiln::rand(sizes, d);
    return kiln::randn(sizes, d);
  };
  if (op == OpId::Arange) {
    rows.push_back(error_row<ValueError>(op, "ZeroStep", [] { kiln::arange(0, 5, 0); }, {b}));
    rows.push_back(error_row<ValueError>(op, "StepAgainstTheBounds", [] { kiln::arange(0, 5, -1); },
                                         {b, "5", "-1"}));
    rows.push_back(
        error_row<ValueError>(op, "NaNBound", [] { kiln::arange(0.0, kNaN, 1.0); }, {b}));
    rows.push_back(
        error_row<ValueError>(op, "InfBound", [] { kiln::arange(0.0, kInf, 1.0); }, {b}));
    rows.push_back(error_row<DTypeError>(op, "BoolDType",
                                         [] { kiln::arange(0, 2, 1, DType::Bool); }, {b, "bool"}));
    rows.push_back(meta_row(
        op, "Empty", [] { return kiln::arange(3, 3, 1, DType::Int64); }, {0}, DType::Int64));
    rows.push_back(huge_row(
        op, [] { kiln::arange(int64_t{0}, int64_t{1} << 62, int64_t{1}, DType::Int64); }, b));
    return;
  }
  rows.push_back(error_row<ShapeError>(op, "NegativeSize",
                                       [make_sized] {
                                         make_sized({2, -1}, DType::Float32);
                                       },
                                       {b, "-1"}));
  rows.push_back(
      error_row<ShapeError>(op, "ElementCountOverflow",
                            [make_sized, overflow] { make_sized(overflow, DType::Float32); }, {b}));
  if (op == OpId::Rand || op == OpId::Randn) {
    rows.push_back(error_row<DTypeError>(
        op, "IntegerDType", [make_sized] { make_sized({3}, DType::Int32); }, {b, "int32"}));
  }
  if (op == OpId::Full) {
    rows.push_back(ieee_row(
        op, "NaNAndInfFill",
        [] {
          return kiln::cat({kiln::full({2}, kNaN), kiln::full({1}, -kInf)});
        },
        Host({3}, {kNaN, kNaN, -kInf}), DType::Float32, tol_exact()));
  }
  rows.push_back(meta_row(
      op, "Empty",
      [make_sized] {
        return make_sized({0, 4}, DType::Float32);
      },
      {0, 4}, DType::Float32));
  rows.push_back(huge_row(
      op, [make_sized, too_many] { make_sized(too_many, DType::Float32); }, b));
  rows.push_back(huge_row(
      op,
      [make_sized] {
        make_sized({kHuge, kHuge}, DType::Float64);
      },
      b, "Huge2D"));
}

void view_rows(OpId op, std::vector<Row>& rows) {
  switch (op) {
    case OpId::View:
      rows.push_back(error_row<ShapeError>(op, "ElementCount",
                                           [] {
                                             f32({2, 3}).view({4});
                                           },
                                           {"[view]", "6", "[4]"}));
      rows.push_back(error_row<ShapeError>(op, "StridesDoNotAllow",
                                           [] {
                                             f32({2, 3}).t().view({6});
                                           },
                                           {"[view]", "[3, 2]", "[6]"}));
      rows.push_back(error_row<ShapeError>(op, "TwoInferredDims",
                                           [] {
                                             f32({2, 3}).view({-1, -1});
                                           },
                                           {"[view]"}));
      rows.push_back(error_row<ShapeError>(op, "InferredDimOfEmpty",
                                           [] {
                                             f32({0, 3}).view({-1, 0});
                                           },
                                           {"[view]"}));
      rows.push_back(meta_row(
          op, "EmptyReshaped",
          [] {
            return f32({0, 3}).view({3, 0, 1});
          },
          {3, 0, 1}, DType::Float32));
      // Reshaping a broadcast tensor is a view (stride 0); copying it out is the request.
      rows.push_back(huge_row(
          op, [] { huge().reshape({-1}).contiguous(); }, "[cast]"));
      return;
    case OpId::Permute:
      rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                           [] {
                                             f32({2, 3}).permute({0, 2});
                                           },
                                           {"[permute]", "2"}));
      rows.push_back(error_row<ValueError>(op, "RepeatedDim",
                                           [] {
                                             f32({2, 3}).permute({0, 0});
                                           },
                                           {"[permute]"}));
      rows.push_back(error_row<ShapeError>(op, "WrongLength",
                                           [] {
                                             f32({2, 3}).permute({0});
                                           },
                                           {"[permute]", "[2, 3]"}));
      rows.push_back(meta_row(
          op, "Empty",
          [] {
            return f32({0, 3}).permute({1, 0});
          },
          {3, 0}, DType::Float32));
      rows.push_back(huge_row(
          op, [] { huge().t().contiguous(); }, "["));
      return;
    case OpId::Slice:
      rows.push_back(error_row<ValueError>(op, "ZeroStep", [] { f32({4}).slice(0, 0, 4, 0); },
                                           {"[slice]", "0"}));
      rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                           [] {
                                             f32({2, 3}).slice(2, 0, 1);
                                           },
                                           {"[slice]", "2"}));
      rows.push_back(
          error_row<IndexError>(op, "ZeroDimInput", [] { f32({}).slice(0, 0, 1); }, {"[slice]"}));
      rows.push_back(meta_row(
          op, "EmptyRange",
          [] {
            return f32({4, 2}).slice(0, 3, 1);
          },
          {0, 2}, DType::Float32));
      rows.push_back(meta_row(
          op, "BoundsPastTheEnd",
          [] {
            return f32({4, 2}).slice(0, -100, 100, 3);
          },
          {2, 2}, DType::Float32));
      rows.push_back(huge_row(
          op, [] { huge().slice(0, 0, kHuge, 1).contiguous(); }, "["));
      return;
    case OpId::Select:
      rows.push_back(error_row<IndexError>(op, "IndexOutOfRange",
                                           [] {
                                             f32({2, 3}).select(1, 3);
                                           },
                                           {"[select]", "3"}));
      rows.push_back(error_row<IndexError>(op, "IndexOfAnEmptyDim",
                                           [] {
                                             f32({0, 3}).select(0, 0);
                                           },
                                           {"[select]", "0"}));
      rows.push_back(
          error_row<IndexError>(op, "ZeroDimInput", [] { f32({}).select(0, 0); }, {"[select]"}));
      rows.push_back(ieee_row(
          op, "NaNSelected",
          [] {
            return values({1, kNaN, kInf}).select(0, -2);
          },
          Host({}, {kNaN}), DType::Float32, tol_exact()));
      return;
    case OpId::Expand:
      rows.push_back(error_row<ShapeError>(op, "NonSingleton",
                                           [] {
                                             f32({3, 2}).expand({3, 4});
                                           },
                                           {"[expand]", "[3, 2]", "[3, 4]"}));
      rows.push_back(error_row<ShapeError>(op, "FewerDims",
                                           [] {
                                             f32({2, 3}).expand({3});
                                           },
                                           {"[expand]", "[2, 3]", "[3]"}));
      rows.push_back(error_row<ShapeError>(op, "NegativeNewDim",
                                           [] {
                                             f32({3}).expand({-1, 3});
                                           },
                                           {"[expand]"}));
      // 2^80 elements cannot be counted in an int64.
      rows.push_back(
          error_row<ShapeError>(op, "ElementCountOverflow",
                                [] {
                                  f32({1, 1}).expand({int64_t{1} << 40, int64_t{1} << 40});
                                },
                                {"[expand]"}));
      rows.push_back(meta_row(
          op, "ToEmpty",
          [] {
            return f32({1, 3}).expand({0, 3});
          },
          {0, 3}, DType::Float32));
      rows.push_back(huge_row(
          op, [] { huge().contiguous(); }, "["));
      return;
    case OpId::Squeeze:
      rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                           [] {
                                             f32({2, 3}).squeeze(2);
                                           },
                                           {"[squeeze]", "2"}));
      rows.push_back(meta_row(
          op, "EmptyKept",
          [] {
            return f32({0, 1, 3}).squeeze();
          },
          {0, 3}, DType::Float32));
      return;
    default:  // Unsqueeze
      rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                           [] {
                                             f32({2, 3}).unsqueeze(3);
                                           },
                                           {"[unsqueeze]", "3"}));
      rows.push_back(meta_row(
          op, "Empty", [] { return f32({0}).unsqueeze(-1); }, {0, 1}, DType::Float32));
      return;
  }
}

// gather / scatter / scatter_add / index_add, argsort / topk, cumsum / cumprod / prod.
void along_dim_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  auto call = [op](const Tensor& x, int64_t dim, const Tensor& index) {
    const Tensor src = kiln::zeros(index.sizes(), x.dtype());
    switch (op) {
      case OpId::Gather:
        return kiln::gather(x, dim, index);
      case OpId::Scatter:
        return kiln::scatter(x, dim, index, src);
      case OpId::ScatterAdd:
        return kiln::scatter_add(x, dim, index, src);
      default:
        return kiln::index_add(x, dim, index.reshape({-1}),
                               kiln::zeros({index.numel(), x.size(1)}, x.dtype()));
    }
  };
  switch (op) {
    case OpId::Gather:
    case OpId::Scatter:
    case OpId::ScatterAdd:
    case OpId::IndexAdd: {
      rows.push_back(error_row<IndexError>(op, "IndexOutOfRange",
                                           [call] {
                                             call(f32({3, 2}), 0, idx({0, 3}).view({2, 1}));
                                           },
                                           {b, "index 3", "size 3"}));
      rows.push_back(error_row<IndexError>(op, "NegativeIndex",
                                           [call] {
                                             call(f32({3, 2}), 0, idx({-1, 0}).view({2, 1}));
                                           },
                                           {b, "index -1"}));
      rows.push_back(error_row<DTypeError>(op, "FloatIndex",
                                           [call] {
                                             call(f32({3, 2}), 0, f32({2, 1}));
                                           },
                                           {b, "index", "float32"}));
      rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                           [call] {
                                             call(f32({3, 2}), 2, idx({0, 1}).view({2, 1}));
                                           },
                                           {b, "2"}));
      if (op != OpId::IndexAdd) {
        rows.push_back(error_row<ShapeError>(op, "IndexRank",
                                             [call] {
                                               call(f32({3, 2}), 0, idx({0, 1}));
                                             },
                                             {b, "rank"}));
        rows.push_back(error_row<ShapeError>(op, "IndexLargerThanInput",
                                             [call] {
                                               call(f32({3, 2}), 0, idx({0, 0, 0}).view({1, 3}));
                                             },
                                             {b, "[1, 3]", "[3, 2]"}));
      }
      return;
    }
    case OpId::Argsort:
    case OpId::Topk:
      rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                           [op] {
                                             if (op == OpId::Topk)
                                               kiln::topk(f32({3, 2}), 1, 2);
                                             else
                                               kiln::argsort(f32({3, 2}), 2);
                                           },
                                           {b, "2"}));
      rows.push_back(ieee_row(
          op, "NaNIsTheLargest",
          [op] {
            const Tensor x = values({1.0, kNaN, -kInf, kInf});
            return op == OpId::Topk ? kiln::topk(x, 2).indices : kiln::argsort(x, 0, true);
          },
          op == OpId::Topk ? Host({2}, {1, 3}) : Host({4}, {1, 3, 0, 2}), DType::Int64,
          tol_exact()));
      if (op == OpId::Topk) {
        rows.push_back(error_row<kiln::Error>(op, "KTooLarge", [] { kiln::topk(f32({3}), 4); },
                                              {b, "k 4", "size 3"}));
      }
      return;
    default:
      rows.push_back(error_row<IndexError>(op, "DimOutOfRange",
                                           [op] {
                                             if (op == OpId::Prod) kiln::prod(f32({3, 2}), 2);
                                             if (op == OpId::Cumsum) kiln::cumsum(f32({3, 2}), -3);
                                             if (op == OpId::Cumprod) kiln::cumprod(f32({3, 2}), 2);
                                           },
                                           {b}));
      rows.push_back(ieee_row(
          op, "NaNInfPropagate",
          [op] {
            const Tensor x = values({2.0, kInf, kNaN});
            if (op == OpId::Prod) return kiln::prod(x, 0, true);
            return op == OpId::Cumsum ? kiln::cumsum(x, 0) : kiln::cumprod(x, 0);
          },
          op == OpId::Prod ? Host({1}, {kNaN}) : Host({3}, {2.0, kInf, kNaN}), DType::Float32,
          tol_exact()));
      return;
  }
}

// multinomial (bad probabilities, counts) and nonzero (shape from a host read).
void sample_rows(OpId op, std::vector<Row>& rows) {
  const std::string b = bracket(op);
  if (op == OpId::Nonzero) {
    rows.push_back(ieee_row(
        op, "NaNAndInfAreNonzero",
        [] {
          return kiln::nonzero(values({0.0, kNaN, 0.0, -kInf})).reshape({-1});
        },
        Host({2}, {1, 3}), DType::Int64, tol_exact()));
    rows.push_back(meta_row(
        op, "EmptyAndAllZero",
        [] {
          return kiln::nonzero(kiln::zeros({0, 3}));
        },
        {0, 2}, DType::Int64));
    rows.push_back(meta_row(
        op, "ZeroDim", [] { return kiln::nonzero(kiln::ones({})); }, {1, 0}, DType::Int64));
    return;
  }
  rows.push_back(error_row<kiln::Error>(op, "NaNProbability",
                                        [] {
                                          kiln::multinomial(values({0.5, kNaN}), 1);
                                        },
                                        {b, "nan"}));
  rows.push_back(error_row<kiln::Error>(op, "NegativeProbability",
                                        [] {
                                          kiln::multinomial(values({0.5, -1.0}), 1);
                                        },
                                        {b, "< 0"}));
  rows.push_back(error_row<kiln::Error>(op, "ZeroTotal",
                                        [] {
                                          kiln::multinomial(values({0.0, 0.0}), 1, true);
                                        },
                                        {b, "sum"}));
  rows.push_back(error_row<kiln::Error>(op, "TooFewPositiveCategories",
                                        [] {
                                          kiln::multinomial(values({0.0, 1.0, 0.0}), 2);
                                        },
                                        {b, "not enough"}));
  rows.push_back(error_row<kiln::Error>(op, "MoreSamplesThanCategories",
                                        [] {
                                          kiln::multinomial(values({1.0, 1.0}), 3);
                                        },
                                        {b, "3", "2 categories"}));
  rows.push_back(error_row<ShapeError>(op, "Rank3",
                                       [] {
                                         kiln::multinomial(kiln::abs(f32({2, 2, 2})), 1);
                                       },
                                       {b, "rank"}));
  rows.push_back(error_row<DTypeError>(
      op, "IntProbs", [] { kiln::multinomial(kiln::ones({3}, DType::Int64), 1); }, {b, "int64"}));
}

// all_reduce on a world of one (tcp, no sockets): a non-contiguous tensor, a bool AVG,
// a group that no longer exists.
void collective_rows(OpId op, std::vector<Row>& rows) {
  namespace dist = kiln::distributed;
  const std::string b = bracket(op);
  auto one = [] { return dist::make_tcp_group(dist::Rendezvous{}); };
  rows.push_back(error_row<ValueError>(op, "NonContiguous",
                                       [one] {
                                         one()->all_reduce(f32({3, 4}).t());
                                       },
                                       {b, "contiguous"}));
  rows.push_back(error_row<DTypeError>(
      op, "IntAvg",
      [one] { one()->all_reduce(kiln::ones({3}, DType::Int64), dist::ReduceOp::Avg); },
      {b, "AVG"}));
  rows.push_back(error_row<ValueError>(op, "GroupGone",
                                       [one] {
                                         const Tensor t = f32({3});
                                         const int64_t id =
                                             one()->id();  // destroyed at the end of this statement
                                         kiln::OpCall call{OpId::AllReduce, {t}, {}, {}};
                                         call.attrs.count = id;
                                         kiln::dispatch_into(call, t);
                                       },
                                       {b, "no longer exists"}));
}

std::vector<Row> rows_for(OpId op) {
  std::vector<Row> rows;
  switch (kiln::op_info(op).family) {
    case kiln::OpFamily::Unary:
      unary_rows(op, rows);
      break;
    case kiln::OpFamily::Binary:
      binary_rows(op, rows);
      break;
    case kiln::OpFamily::Where:
    case kiln::OpFamily::Clamp:
      where_clamp_rows(op, rows);
      break;
    case kiln::OpFamily::Reduce:
      reduce_rows(op, rows);
      break;
    case kiln::OpFamily::Softmax:
      softmax_rows(op, rows);
      break;
    case kiln::OpFamily::LayerNorm:
      layer_norm_rows(rows);
      break;
    case kiln::OpFamily::Attention:
      attention_rows(op, rows);
      break;
    case kiln::OpFamily::Recurrent:
      lstm_rows(op, rows);
      break;
    case kiln::OpFamily::Matmul:
    case kiln::OpFamily::Linear:
      matmul_rows(op, rows);
      break;
    case kiln::OpFamily::Conv2d:
    case kiln::OpFamily::Pool2d:
    case kiln::OpFamily::Unfold:
      conv_pool_rows(op, rows);
      break;
    case kiln::OpFamily::Cat:
    case kiln::OpFamily::IndexSelect:
      cat_index_rows(op, rows);
      break;
    case kiln::OpFamily::Gather:
    case kiln::OpFamily::Scatter:
    case kiln::OpFamily::Sort:
    case kiln::OpFamily::Scan:
      along_dim_rows(op, rows);
      break;
    case kiln::OpFamily::Sample:
    case kiln::OpFamily::Nonzero:
      sample_rows(op, rows);
      break;
    case kiln::OpFamily::ToDevice:
      break;
    case kiln::OpFamily::Factory:
    case kiln::OpFamily::Random:
      factory_rows(op, rows);
      break;
    case kiln::OpFamily::View:
      view_rows(op, rows);
      break;
    case kiln::OpFamily::Collective:
      collective_rows(op, rows);
      break;
  }
  device_rows(op, rows);
  return rows;
}

const std::vector<Row>& all_rows() {
  static const std::vector<Row> rows = [] {
    std::vector<Row> out;
    for (int i = 0; i < kiln::kNumOps; ++i)
      for (Row& r : rows_for(static_cast<OpId>(i))) out.push_back(std::move(r));
    return out;
  }();
  return rows;
}

// The runtime still computes right answers: a sum and a matmul against the reference.
::testing::AssertionResult still_works() {
  const Host a = random_host({3, 4}, DType::Float32), b = random_host({4, 2}, DType::Float32);
  Host mm({3, 2});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 4; ++k) mm.at({i, j}) += a.at({i, k}) * b.at({k, j});
  auto r = all_close(kiln::matmul(make(a, DType::Float32), make(b, DType::Float32)), mm,
                     tol_reduce(DType::Float32));
  if (!r) return r;
  double total = 0;
  for (double x : a.v) total += x;
  return all_close(kiln::sum(make(a, DType::Float32)), Host({}, {total}),
                   tol_reduce(DType::Float32));
}

class BadInput : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInput, ClearErrorOrIeeeResultNeverACrash) {
  const Row& row = all_rows()[GetParam()];
  if (row.needs_gpu && !have_gpu()) GTEST_SKIP() << "no CUDA GPU";
  EXPECT_TRUE(row.check());
  EXPECT_TRUE(still_works()) << "after the row";
}

INSTANTIATE_TEST_SUITE_P(Rows, BadInput, ::testing::Range<size_t>(0, all_rows().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           const Row& r = all_rows()[info.param];
                           std::string op;  // log_softmax -> LogSoftmax
                           bool upper = true;
                           for (char c : std::string(kiln::op_name(r.op))) {
                             if (c == '_') {
                               upper = true;
                               continue;
                             }
                             op += upper ? static_cast<char>(std::toupper(c)) : c;
                             upper = false;
                           }
                           return op + "_" + r.name;
                         });

// Every row of the registry has bad-input rows: a new op without them fails here.
TEST(BadInputTable, CoversEveryRegistryOp) {
  std::map<OpId, int> count;
  for (const Row& r : all_rows()) ++count[r.op];
  for (int i = 0; i < kiln::kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    EXPECT_GE(count[op], 2) << kiln::op_name(op) << " has " << count[op] << " bad-input rows";
  }
}

}  // namespace
}  // namespace kt
