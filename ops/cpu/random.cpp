// CPU kernels of the Random family (ops.def): rand (U[0, 1)) and randn (N(0, 1)).
//
// scalars[0] = seed, scalars[1] = offset. Element i (row-major) is
// philox::rand_value / randn_value(seed, offset, i), computed in double and converted to
// out's dtype like a cast, so the CPU and CUDA kernels give bit-identical tensors.
#include <algorithm>
#include <cmath>  // before ops/philox.h, which uses ::sqrt/::log/::cos without it

#include "ops/cpu/convert.h"
#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "ops/philox.h"
#include "runtime/error.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

// A Philox draw (and Box-Muller for randn) costs tens of ns: split finer than copies.
constexpr int64_t kRandomGrain = 4096;

// rand of at most 32 bits: element i is word i % 4 of draw i / 4, so each draw is made
// once for its four elements (GCC keeps the rounds scalar: about 12 ns a draw here); the
// value is rand_value's, (word >> (32 - bits)) * 2^-bits, exact in double.
template <class T>
void fill_uniform_narrow(T* data, int64_t n, uint64_t seed, uint64_t offset, int bits) {
  const int64_t draws = (n + 3) / 4;
  const double scale = 1.0 / static_cast<double>(1ull << bits);
  const int shift = 32 - bits;
  const auto value = [=](uint32_t w) {
    return convert_value<T>(static_cast<double>(static_cast<int32_t>(w >> shift)) * scale);
  };
  parallel_for(0, draws, kRandomGrain / 4, [=](int64_t c0, int64_t c1) {
    const int64_t whole = std::min(c1, n / 4);  // draws whose four elements all exist
    for (int64_t c = c0; c < whole; ++c) {
      const philox::Uint4 r = philox::draw(seed, offset, static_cast<uint64_t>(c));
      T* d = data + 4 * c;
      d[0] = value(r.x);
      d[1] = value(r.y);
      d[2] = value(r.z);
      d[3] = value(r.w);
    }
    for (int64_t c = std::max(c0, whole); c < c1; ++c) {  // the last, partial draw
      const philox::Uint4 r = philox::draw(seed, offset, static_cast<uint64_t>(c));
      for (int64_t i = 4 * c; i < n; ++i) data[i] = value(philox::word_of(r, i & 3));
    }
  });
}

template <class T>
void fill_random(const Tensor& out, OpId op, uint64_t seed, uint64_t offset) {
  T* data = out.data<T>();
  const bool normal = op == OpId::Randn;
  if (!normal && philox::uniform_bits<T>() <= 32) {
    fill_uniform_narrow(data, out.numel(), seed, offset, philox::uniform_bits<T>());
    return;
  }
  parallel_for(0, out.numel(), kRandomGrain, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t index = static_cast<uint64_t>(i);
      const double v = normal ? philox::randn_value(seed, offset, index)
                              : philox::rand_value(seed, offset, index, philox::uniform_bits<T>());
      data[i] = convert_value<T>(v);
    }
  });
}

}  // namespace

void random(const OpCall& call, const Tensor& out) {
  KILN_CHECK(call.op == OpId::Rand || call.op == OpId::Randn, Error, "[", call.name(),
             "] is not a random op");
  if (out.numel() == 0) return;
  if (!out.is_contiguous()) {  // not made by the dispatcher, but cheap to support
    with_output(out, out.dtype(), [&](const Tensor& packed) { random(call, packed); });
    return;
  }
  const uint64_t seed = static_cast<uint64_t>(call.scalars[0].to_int());
  const uint64_t offset = static_cast<uint64_t>(call.scalars[1].to_int());
  visit_dtype(out.dtype(),
              [&](auto zero) { fill_random<decltype(zero)>(out, call.op, seed, offset); });
}

}  // namespace kiln::cpu
