// Test helpers shared by the kiln GoogleTest suite: an independent double-precision
// reference (host arrays, N-D indexing, broadcasting), random input data from a
// per-run seed, exact rounding to every kiln dtype written here (not kiln's own), and an
// allclose that reports the worst element. Nothing in here computes expected values
// with kiln; kiln is only used to build inputs (from_vector) and read outputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/api.h"
#include "runtime/cuda_context.h"
#include "runtime/error.h"

namespace kt {

using kiln::Device;
using kiln::Dims;
using kiln::DType;
using kiln::Tensor;

// ---------------------------------------------------------------- seeds
// The run seed: KILN_TEST_SEED if set, else fresh from std::random_device. Every test
// reseeds rng() with run_seed() mixed with its own name, so a failing test reproduces
// alone; a listener prints the seed of each failing test (reference.cpp).
uint64_t run_seed();
std::mt19937_64& rng();

double uniform(double lo, double hi);
int64_t uniform_int(int64_t lo, int64_t hi);  // inclusive

// ---------------------------------------------------------------- dtypes
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v = {DType::Float32,  DType::Float64, DType::Float16,
                                       DType::BFloat16, DType::Int32,   DType::Int64,
                                       DType::Bool};
  return v;
}
inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> v = {DType::Float32, DType::Float64, DType::Float16,
                                       DType::BFloat16};
  return v;
}
inline const std::vector<DType>& numeric_dtypes() {  // all but bool
  static const std::vector<DType> v = {DType::Float32,  DType::Float64, DType::Float16,
                                       DType::BFloat16, DType::Int32,   DType::Int64};
  return v;
}
inline bool is_float(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::Float16 || d == DType::BFloat16;
}
inline bool is_int(DType d) { return d == DType::Int32 || d == DType::Int64; }
// Short names written here (test names must not depend on kiln's dtype_name).
std::string name(DType d);
std::string dims_string(const Dims& d);  // "[2, 3]"
std::string param_name(const ::testing::TestParamInfo<DType>& info);

// ---------------------------------------------------------------- rounding
// Round-to-nearest-even encoders for binary16 and bfloat16 written from the IEEE
// definitions (subnormals, overflow to inf, NaN), plus decoders.
uint16_t half_bits(double x);
uint16_t bf16_bits(double x);
double half_value(uint16_t bits);
double bf16_value(uint16_t bits);
// The value x becomes when stored as dtype d (floats round to nearest even; integers
// truncate toward zero like a C cast; bool is x != 0).
double round_to(DType d, double x);
// Half a unit in the last place of dtype d, relative (for float dtypes).
double epsilon(DType d);

// ---------------------------------------------------------------- host arrays
inline int64_t numel_of(const Dims& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}
Dims row_major_strides(const Dims& sizes);  // PyTorch's contiguous strides
int64_t ravel(const Dims& index, const Dims& sizes);
Dims unravel(int64_t flat, const Dims& sizes);
// Calls f(index) for every index of sizes in row-major order.
void for_each_index(const Dims& sizes, const std::function<void(const Dims&)>& f);
// numpy broadcasting of two shapes (written here, not kiln's).
Dims broadcast(const Dims& a, const Dims& b);
// The flat index into an array of shape `sizes` that broadcasts to out_index.
int64_t broadcast_flat(const Dims& out_index, const Dims& sizes);
// Wraps a negative dim.
inline int64_t wrap(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

struct Host {
  Dims sizes;
  std::vector<double> v;

  Host() = default;
  Host(const Dims& s, std::vector<double> values) : sizes(s), v(std::move(values)) {}
  explicit Host(const Dims& s) : sizes(s), v(static_cast<size_t>(numel_of(sizes)), 0.0) {}
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  double& at(const Dims& index) { return v[static_cast<size_t>(ravel(index, sizes))]; }
  double at(const Dims& index) const { return v[static_cast<size_t>(ravel(index, sizes))]; }
  // The element that broadcasts to out_index of a larger shape.
  double bat(const Dims& out_index) const {
    return v[static_cast<size_t>(broadcast_flat(out_index, sizes))];
  }
};

// Pointwise maps over host arrays (with broadcasting for two inputs).
Host map(const Host& a, const std::function<double(double)>& f);
Host map2(const Host& a, const Host& b, const std::function<double(double, double)>& f);
// Rounds every element to dtype d.
Host rounded(const Host& a, DType d);
// Host permutation / transposition: out[i_perm...] layout like Tensor::permute.
Host permute(const Host& a, const Dims& order);

// Random host data already representable in dtype d. Floats: uniform in [lo, hi];
// integers: uniform in [ilo, ihi]; bool: fair coin.
struct Range {
  double lo = -2.0, hi = 2.0;
  int64_t ilo = -9, ihi = 9;
  bool nonzero = false;  // rejects |x| < min_abs (and integer 0)
  double min_abs = 0.0;
};
Host random_host(const Dims& sizes, DType d, const Range& r = {});

// ---------------------------------------------------------------- kiln <-> host
// A kiln tensor holding exactly h's values (which must be representable in d).
Tensor make(const Host& h, DType d, Device device = kiln::kCPU);
// Layouts with the same logical values but different strides / offsets.
enum class Layout { Contiguous, Transposed, Stepped, Offset, Permuted };
std::string name(Layout l);
Tensor make(const Host& h, DType d, Layout layout, Device device = kiln::kCPU);
// Reads any kiln tensor (any dtype, device, strides) into a host array.
Host read(const Tensor& t);

// ---------------------------------------------------------------- comparisons
struct Tol {
  double rtol = 0.0, atol = 0.0;
};
// Pointwise tolerances by dtype: exact ops (0), rounding-only ops, transcendentals.
Tol tol_exact();
Tol tol_pointwise(DType d);
Tol tol_reduce(DType d);
// |actual - expected| <= atol + rtol * |expected|, NaN == NaN, inf == inf of the same
// sign; checks the shape first; on failure reports the count of bad elements and the
// worst one with its N-D index.
::testing::AssertionResult all_close(const Host& actual, const Host& expected, Tol tol);
::testing::AssertionResult all_close(const Tensor& actual, const Host& expected, Tol tol);
// Shape and dtype of a kiln tensor.
::testing::AssertionResult has_meta(const Tensor& t, const Dims& sizes, DType d);

// ---------------------------------------------------------------- errors
// Runs f, expects exactly error type E (or a subclass), and that its message contains
// every substring. Reports the dynamic type and message otherwise.
std::string demangled_type(const std::exception& e);
template <class E, class F>
::testing::AssertionResult throws(F&& f, const std::vector<std::string>& substrings = {}) {
  try {
    f();
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& s : substrings) {
      if (msg.find(s) == std::string::npos)
        return ::testing::AssertionFailure()
               << "message lacks \"" << s << "\": " << demangled_type(e) << ": " << msg;
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure()
           << "wrong exception type " << demangled_type(e) << ": " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "a non-std exception was thrown";
  }
  return ::testing::AssertionFailure() << "no exception was thrown";
}

// True when a CUDA device can be used.
inline bool have_gpu() { return kiln::cuda_context::is_available(); }

}  // namespace kt
