// Implementation of the test helpers (see reference.h) and the seed listener.
#include "reference.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>

namespace kt {

// ---------------------------------------------------------------- seeds

uint64_t run_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("KILN_TEST_SEED"))
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    std::random_device rd;
    return static_cast<uint64_t>((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }();
  return seed;
}

std::mt19937_64& rng() {
  static std::mt19937_64 engine(run_seed());
  return engine;
}

double uniform(double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng());
}
int64_t uniform_int(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng());
}

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string full_name(const ::testing::TestInfo& info) {
  return std::string(info.test_suite_name()) + "." + info.name();
}

class SeedListener : public ::testing::EmptyTestEventListener {
 public:
  void OnTestProgramStart(const ::testing::UnitTest&) override {
    std::printf("[ kiln    ] test seed %llu (set KILN_TEST_SEED to repeat a run)\n",
                static_cast<unsigned long long>(run_seed()));
  }
  void OnTestStart(const ::testing::TestInfo& info) override {
    rng().seed(run_seed() ^ fnv1a(full_name(info)));
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result() != nullptr && info.result()->Failed()) {
      std::printf(
          "[ SEED     ] %s failed with KILN_TEST_SEED=%llu (repeat with "
          "KILN_TEST_SEED=%llu --gtest_filter='%s')\n",
          full_name(info).c_str(), static_cast<unsigned long long>(run_seed()),
          static_cast<unsigned long long>(run_seed()), full_name(info).c_str());
    }
  }
};

const bool kListenerInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedListener);
  return true;
}();

}  // namespace

// ---------------------------------------------------------------- dtypes

std::string name(DType d) {
  switch (d) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "?";
}

std::string dims_string(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::string param_name(const ::testing::TestParamInfo<DType>& info) { return name(info.param); }

// ---------------------------------------------------------------- rounding

namespace {

// Encodes |x| (finite, non-negative) into a binary format with `mant_bits` explicit
// mantissa bits and exponents [emin, emax]; returns the unsigned bit pattern without
// the sign. Rounds to nearest even (std::nearbyint in the default rounding mode).
uint32_t encode_magnitude(double a, int mant_bits, int emin, int emax) {
  const uint32_t inf_bits = static_cast<uint32_t>(emax - emin + 2) << mant_bits;
  const double one_mant = std::ldexp(1.0, mant_bits);  // 2^mant_bits
  if (a < std::ldexp(1.0, emin)) {                     // subnormal range
    const double m = std::nearbyint(std::ldexp(a, mant_bits - emin));
    return static_cast<uint32_t>(m);  // m == 2^mant_bits is the smallest normal
  }
  int e2 = 0;
  std::frexp(a, &e2);                                       // a = f * 2^e2, f in [0.5, 1)
  int e = e2 - 1;                                           // a in [2^e, 2^(e+1))
  double m = std::nearbyint(std::ldexp(a, mant_bits - e));  // in [2^mb, 2^(mb+1)]
  if (m == 2 * one_mant) {
    m = one_mant;
    ++e;
  }
  if (e > emax) return inf_bits;
  return (static_cast<uint32_t>(e - emin + 1) << mant_bits) | (static_cast<uint32_t>(m - one_mant));
}

uint16_t encode(double x, int mant_bits, int emin, int emax, uint16_t nan_bits) {
  if (std::isnan(x)) return nan_bits;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const uint32_t inf_bits = static_cast<uint32_t>(emax - emin + 2) << mant_bits;
  if (std::isinf(a)) return static_cast<uint16_t>(sign | inf_bits);
  return static_cast<uint16_t>(sign | encode_magnitude(a, mant_bits, emin, emax));
}

double decode(uint16_t bits, int mant_bits, int emin, int exp_field_bits) {
  const bool neg = bits & 0x8000;
  const uint32_t exp_max = (1u << exp_field_bits) - 1;
  const uint32_t e = (bits >> mant_bits) & exp_max;
  const uint32_t m = bits & ((1u << mant_bits) - 1);
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), emin - mant_bits);
  } else if (e == exp_max) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(static_cast<double>(m) + std::ldexp(1.0, mant_bits),
                   static_cast<int>(e) - 1 + emin - mant_bits);
  }
  return neg ? -v : v;
}

}  // namespace

uint16_t half_bits(double x) { return encode(x, 10, -14, 15, 0x7e00); }
uint16_t bf16_bits(double x) { return encode(x, 7, -126, 127, 0x7fc0); }
double half_value(uint16_t bits) { return decode(bits, 10, -14, 5); }
double bf16_value(uint16_t bits) { return decode(bits, 7, -126, 8); }

double round_to(DType d, double x) {
  switch (d) {
    case DType::Float64:
      return x;
    case DType::Float32:
      return static_cast<double>(static_cast<float>(x));
    case DType::Float16:
      return half_value(half_bits(x));
    case DType::BFloat16:
      return bf16_value(bf16_bits(x));
    case DType::Int32:
      return static_cast<double>(static_cast<int32_t>(std::trunc(x)));
    case DType::Int64:
      return static_cast<double>(static_cast<int64_t>(std::trunc(x)));
    case DType::Bool:
      return x != 0.0 ? 1.0 : 0.0;
  }
  return x;
}

double epsilon(DType d) {
  switch (d) {
    case DType::Float64:
      return std::ldexp(1.0, -53);
    case DType::Float32:
      return std::ldexp(1.0, -24);
    case DType::Float16:
      return std::ldexp(1.0, -11);
    case DType::BFloat16:
      return std::ldexp(1.0, -8);
    default:
      return 0.0;
  }
}

// ---------------------------------------------------------------- host arrays

Dims row_major_strides(const Dims& sizes) {
  // PyTorch's contiguous strides: size-0 dims count as 1 (empty(1, 0, 5) has [5, 5, 1]).
  Dims s(sizes.size(), 1);
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 2; i >= 0; --i)
    s[static_cast<size_t>(i)] =
        s[static_cast<size_t>(i + 1)] * std::max<int64_t>(1, sizes[static_cast<size_t>(i + 1)]);
  return s;
}

int64_t ravel(const Dims& index, const Dims& sizes) {
  int64_t flat = 0;
  for (size_t i = 0; i < sizes.size(); ++i) flat = flat * sizes[i] + index[i];
  return flat;
}

Dims unravel(int64_t flat, const Dims& sizes) {
  Dims index(sizes.size(), 0);
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    const int64_t s = sizes[static_cast<size_t>(i)];
    index[static_cast<size_t>(i)] = s ? flat % s : 0;
    flat = s ? flat / s : 0;
  }
  return index;
}

void for_each_index(const Dims& sizes, const std::function<void(const Dims&)>& f) {
  const int64_t n = numel_of(sizes);
  if (n == 0) return;
  Dims index(sizes.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(index);
    for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
      const auto u = static_cast<size_t>(i);
      if (++index[u] < sizes[u]) break;
      index[u] = 0;
    }
  }
}

Dims broadcast(const Dims& a, const Dims& b) {
  const size_t n = std::max(a.size(), b.size());
  Dims out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) ADD_FAILURE() << "test bug: shapes do not broadcast";
    out[i] = x == 1 ? y : x;
  }
  return out;
}

int64_t broadcast_flat(const Dims& out_index, const Dims& sizes) {
  const size_t lead = out_index.size() - sizes.size();
  int64_t flat = 0;
  for (size_t i = 0; i < sizes.size(); ++i)
    flat = flat * sizes[i] + (sizes[i] == 1 ? 0 : out_index[lead + i]);
  return flat;
}

Host map(const Host& a, const std::function<double(double)>& f) {
  Host out(a.sizes);
  for (size_t i = 0; i < a.v.size(); ++i) out.v[i] = f(a.v[i]);
  return out;
}

Host map2(const Host& a, const Host& b, const std::function<double(double, double)>& f) {
  Host out(broadcast(a.sizes, b.sizes));
  int64_t k = 0;
  for_each_index(out.sizes, [&](const Dims& i) { out.v[k++] = f(a.bat(i), b.bat(i)); });
  return out;
}

Host rounded(const Host& a, DType d) {
  return map(a, [d](double x) { return round_to(d, x); });
}

Host permute(const Host& a, const Dims& order) {
  Dims sizes;
  for (int64_t o : order) sizes.push_back(a.sizes[static_cast<size_t>(o)]);
  Host out(sizes);
  int64_t k = 0;
  Dims src(a.sizes.size(), 0);
  for_each_index(sizes, [&](const Dims& i) {
    for (size_t j = 0; j < order.size(); ++j) src[static_cast<size_t>(order[j])] = i[j];
    out.v[k++] = a.at(src);
  });
  return out;
}

Host random_host(const Dims& sizes, DType d, const Range& r) {
  Host h(sizes);
  for (auto& x : h.v) {
    for (int attempt = 0;; ++attempt) {
      if (d == DType::Bool) {
        x = uniform_int(0, 1);
        if (r.nonzero) x = 1;
      } else if (is_int(d)) {
        x = static_cast<double>(uniform_int(r.ilo, r.ihi));
      } else {
        x = round_to(d, uniform(r.lo, r.hi));
      }
      const bool ok = !r.nonzero || (x != 0.0 && std::fabs(x) >= r.min_abs);
      if (ok) break;
      if (attempt > 1000) {
        ADD_FAILURE() << "test bug: empty range for random_host";
        break;
      }
    }
  }
  return h;
}

// ---------------------------------------------------------------- kiln <-> host

namespace {

template <class T, class Conv>
Tensor make_typed(const Host& h, Device device, Conv conv) {
  std::vector<T> values;
  values.reserve(h.v.size());
  for (double x : h.v) values.push_back(conv(x));
  return kiln::from_vector<T>(values, h.sizes, device);
}

}  // namespace

Tensor make(const Host& h, DType d, Device device) {
  switch (d) {
    case DType::Float32:
      return make_typed<float>(h, device, [](double x) { return static_cast<float>(x); });
    case DType::Float64:
      return make_typed<double>(h, device, [](double x) { return x; });
    case DType::Float16:
    case DType::BFloat16: {
      // from_vector has no 16-bit overloads: the values are exact in float32, and the
      // float32 -> 16-bit cast of an exactly representable value is exact (checked
      // bit by bit in test_dtype_promotion.cpp).
      for (double x : h.v) {
        if (!std::isnan(x) && round_to(d, x) != x)
          ADD_FAILURE() << "test bug: " << x << " is not representable in " << name(d);
      }
      Tensor f = make_typed<float>(h, kiln::kCPU, [](double x) { return static_cast<float>(x); });
      return f.to(d).to(device);
    }
    case DType::Int32:
      return make_typed<int32_t>(h, device, [](double x) { return static_cast<int32_t>(x); });
    case DType::Int64:
      return make_typed<int64_t>(h, device, [](double x) { return static_cast<int64_t>(x); });
    case DType::Bool:
      return make_typed<bool>(h, device, [](double x) { return x != 0.0; });
  }
  return {};
}

std::string name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::Stepped:
      return "stepped";
    case Layout::Offset:
      return "offset";
    case Layout::Permuted:
      return "permuted";
  }
  return "?";
}

Tensor make(const Host& h, DType d, Layout layout, Device device) {
  const int64_t rank = h.dim();
  if (layout == Layout::Permuted && rank < 3) layout = Layout::Transposed;
  if (layout == Layout::Transposed && rank < 2) layout = Layout::Stepped;
  if ((layout == Layout::Stepped || layout == Layout::Offset) && rank < 1)
    layout = Layout::Contiguous;
  switch (layout) {
    case Layout::Contiguous:
      return make(h, d, device);
    case Layout::Transposed: {
      Dims order;
      for (int64_t i = 0; i < rank; ++i) order.push_back(i);
      std::swap(order[static_cast<size_t>(rank - 1)], order[static_cast<size_t>(rank - 2)]);
      return make(permute(h, order), d, device).transpose(-1, -2);
    }
    case Layout::Permuted: {
      Dims order;
      for (int64_t i = rank - 1; i >= 0; --i) order.push_back(i);
      return make(permute(h, order), d, device).permute(order);
    }
    case Layout::Stepped: {
      // Store h in the odd positions of a last dim of size 2n+1; junk elsewhere.
      Dims sizes = h.sizes;
      const int64_t n = sizes.back();
      sizes.back() = 2 * n + 1;
      Host storage = random_host(sizes, d);
      for_each_index(h.sizes, [&](const Dims& i) {
        Dims j = i;
        j.back() = 2 * i.back() + 1;
        storage.at(j) = h.at(i);
      });
      return make(storage, d, device).slice(-1, 1, 2 * n + 1, 2);
    }
    case Layout::Offset: {
      // Store h at rows [2, 2 + n) of dim 0 of a larger tensor.
      Dims sizes = h.sizes;
      const int64_t n = sizes[0];
      sizes[0] = n + 3;
      Host storage = random_host(sizes, d);
      for_each_index(h.sizes, [&](const Dims& i) {
        Dims j = i;
        j[0] += 2;
        storage.at(j) = h.at(i);
      });
      return make(storage, d, device).narrow(0, 2, n);
    }
  }
  return {};
}

Host read(const Tensor& t) { return Host(t.sizes(), t.to_vector<double>()); }

// ---------------------------------------------------------------- comparisons

Tol tol_exact() { return {0.0, 0.0}; }

Tol tol_pointwise(DType d) {
  switch (d) {
    case DType::Float32:
      return {1e-5, 1e-6};
    case DType::Float64:
      return {1e-12, 1e-12};
    case DType::Float16:
      return {1e-2, 1e-3};
    case DType::BFloat16:
      return {2e-2, 1e-2};
    default:
      return {0.0, 0.0};
  }
}

Tol tol_reduce(DType d) {
  switch (d) {
    case DType::Float32:
      return {1e-4, 1e-4};
    case DType::Float64:
      return {1e-10, 1e-10};
    case DType::Float16:
      return {1e-2, 1e-2};
    case DType::BFloat16:
      return {2e-2, 2e-2};
    default:
      return {0.0, 0.0};
  }
}

::testing::AssertionResult all_close(const Host& actual, const Host& expected, Tol tol) {
  if (actual.sizes != expected.sizes)
    return ::testing::AssertionFailure()
           << "shape " << dims_string(actual.sizes) << ", expected " << dims_string(expected.sizes);
  if (actual.v.size() != expected.v.size())
    return ::testing::AssertionFailure()
           << "read " << actual.v.size() << " values, expected " << expected.v.size();
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < actual.v.size(); ++i) {
    const double a = actual.v[i], e = expected.v[i];
    double ratio = 0.0;
    if (std::isnan(e) || std::isnan(a)) {
      ratio = std::isnan(e) && std::isnan(a) ? 0.0 : std::numeric_limits<double>::infinity();
    } else if (std::isinf(e) || std::isinf(a)) {
      ratio = a == e ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      const double err = std::fabs(a - e);
      const double allowed = tol.atol + tol.rtol * std::fabs(e);
      if (err > allowed)
        ratio = allowed > 0 ? err / allowed : std::numeric_limits<double>::infinity();
    }
    if (ratio > 0.0) {
      ++bad;
      if (worst < 0 || ratio > worst_ratio) {
        worst = static_cast<int64_t>(i);
        worst_ratio = ratio;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const auto w = static_cast<size_t>(worst);
  std::ostringstream os;
  os.precision(10);
  os << bad << " of " << actual.v.size() << " elements differ (rtol " << tol.rtol << ", atol "
     << tol.atol << "); worst at " << dims_string(unravel(worst, expected.sizes)) << ": got "
     << actual.v[w] << ", expected " << expected.v[w] << " (|diff| "
     << std::fabs(actual.v[w] - expected.v[w]) << ")";
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult all_close(const Tensor& actual, const Host& expected, Tol tol) {
  if (!actual.defined()) return ::testing::AssertionFailure() << "result tensor is undefined";
  return all_close(read(actual), expected, tol);
}

::testing::AssertionResult has_meta(const Tensor& t, const Dims& sizes, DType d) {
  if (!t.defined()) return ::testing::AssertionFailure() << "tensor is undefined";
  if (t.sizes() != sizes || t.dtype() != d)
    return ::testing::AssertionFailure() << "got " << name(t.dtype()) << dims_string(t.sizes())
                                         << ", expected " << name(d) << dims_string(sizes);
  return ::testing::AssertionSuccess();
}

std::string demangled_type(const std::exception& e) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> s(
      abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status), std::free);
  return status == 0 && s ? std::string(s.get()) : std::string(typeid(e).name());
}

}  // namespace kt
