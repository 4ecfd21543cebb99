// CPU Sample and Nonzero families. multinomial: rows checked first (a bad row throws
// kiln::Error with PyTorch's message), then drawn by ops/sample_math.h, one row per
// task. nonzero: the row-major coordinates of the nonzero elements of x; attrs.count
// (found by the caller's host read) must equal their number.
#include <algorithm>
#include <vector>

#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "ops/sample_math.h"
#include "runtime/error.h"
#include "runtime/parallel.h"

namespace kiln::cpu {

void multinomial(const OpCall& call, const Tensor& out) {
  const Tensor probs = kernel_contiguous(call.inputs[0], DType::Float64);
  const int64_t n = probs.size(-1), rows = probs.numel() / n, samples = call.attrs.count;
  const double* p = probs.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const int e = sample::check_row([&](int64_t i) { return p[r * n + i]; }, n, samples,
                                    call.attrs.replacement);
    KILN_CHECK(e == sample::kRowOk, Error, "[multinomial] ", sample::row_error_text(e),
               rows > 1 ? detail::cat(" (row ", r, ")") : std::string());
  }
  const uint64_t seed = static_cast<uint64_t>(call.scalars[0].to_int());
  const uint64_t offset = static_cast<uint64_t>(call.scalars[1].to_int());
  with_output(out, DType::Int64, [&](const Tensor& dst) {
    int64_t* y = dst.data<int64_t>();
    parallel_for(0, rows, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> keys(static_cast<size_t>(n));
      for (int64_t r = lo; r < hi; ++r) {
        const uint64_t base =
            static_cast<uint64_t>(r) * static_cast<uint64_t>(call.attrs.replacement ? samples : n);
        sample::draw_row([&](int64_t i) { return p[r * n + i]; }, n, samples,
                         call.attrs.replacement, seed, offset, base, keys.data(), y + r * samples);
      }
    });
  });
}

void nonzero(const OpCall& call, const Tensor& out) {
  const Tensor x = kernel_contiguous(call.inputs[0], DType::Bool);
  const bool* v = x.data<bool>();
  const Dims& sizes = x.sizes();
  const int64_t rank = x.dim();
  std::vector<int64_t> coords;
  coords.reserve(static_cast<size_t>(call.attrs.count * rank));
  int64_t found = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (!v[i]) continue;
    ++found;
    int64_t rest = i;
    const size_t at = coords.size();
    coords.resize(at + static_cast<size_t>(rank));
    for (int64_t d = rank - 1; d >= 0; --d) {
      coords[at + static_cast<size_t>(d)] = rest % sizes[d];
      rest /= sizes[d];
    }
  }
  KILN_CHECK(found == call.attrs.count, Error, "[nonzero] internal: expected ", call.attrs.count,
             " nonzero elements, found ", found);
  with_output(out, DType::Int64, [&](const Tensor& dst) {
    std::copy(coords.begin(), coords.end(), dst.data<int64_t>());
  });
}

}  // namespace kiln::cpu
