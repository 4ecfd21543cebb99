// Accumulators and loop shapes shared by the reduction kernels.
//
// An accumulator policy P has `Acc`, `identity()`, `add(Acc, T)` (one element),
// `combine(Acc, Acc)` (two partial results, left then right) and `kLanes`, the number
// of independent accumulators reduce_span keeps (enough to hide the latency of one
// step; the counts were measured with GCC 12 at -O3 on SSE2 code). Loop shapes over the
// contiguous [outer, reduced, inner] layout (ops/cpu/reduce_layout.h):
//  - reduce_span: one contiguous run, with independent lanes so the compiler
//    vectorizes it and float sums stay accurate (they accumulate in double);
//  - reduce_chunked: one long run split into fixed-size chunks reduced in parallel and
//    combined in order (deterministic whatever the thread count);
//  - reduce_columns: a block of neighbouring columns of a [reduced, inner] matrix,
//    vectorized across the columns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/cpu/kernel_io.h"
#include "runtime/dtype.h"
#include "runtime/parallel.h"

namespace kiln::cpu {

// Floating sums accumulate in double; bool and integer sums in int64.
template <class T>
struct SumAccumulator {
  using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;
  static constexpr int64_t kLanes = 8;
  static Acc identity() { return Acc(0); }
  static Acc add(Acc acc, T v) { return acc + static_cast<Acc>(v); }
  static Acc combine(Acc a, Acc b) { return a + b; }
};

// Max (kMax) or min; NaN wins and stays.
template <class T, bool kMax>
struct ExtremeAccumulator {
  using Acc = compute_t<T>;
  // Fewer lanes leave the float select loop scalar (4x slower); 64-bit integers have
  // no SSE2 compare, so more lanes only add register pressure.
  static constexpr int64_t kLanes = std::is_floating_point_v<Acc> ? 32 : sizeof(Acc) == 4 ? 16 : 8;
  static Acc identity() {
    if constexpr (std::is_same_v<Acc, bool>) {
      return !kMax;
    } else if constexpr (std::is_floating_point_v<Acc>) {
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  static Acc combine(Acc acc, Acc v) {
    // Bitwise |: a branch-free select, which the compiler vectorizes.
    const bool take = (kMax ? v > acc : v < acc) | is_nan(v);
    return take ? v : acc;
  }
  static Acc add(Acc acc, T v) { return combine(acc, static_cast<Acc>(v)); }
};

// Sum of (v - mean)^2 in double: the second pass of the variance.
template <class T>
struct SquaredDeviationAccumulator {
  using Acc = double;
  static constexpr int64_t kLanes = 8;
  double mean = 0.0;
  static Acc identity() { return 0.0; }
  Acc add(Acc acc, T v) const {
    const double d = static_cast<double>(v) - mean;
    return acc + d * d;
  }
  static Acc combine(Acc a, Acc b) { return a + b; }
};

template <class P, class T>
typename P::Acc reduce_span(const P& policy, const T* p, int64_t n) {
  using Acc = typename P::Acc;
  constexpr int64_t kLanes = P::kLanes;
  Acc lanes[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = P::identity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = policy.add(lanes[j], p[i + j]);
  }
  Acc acc = P::identity();
  for (int64_t j = 0; j < kLanes; ++j) acc = P::combine(acc, lanes[j]);
  for (; i < n; ++i) acc = policy.add(acc, p[i]);
  return acc;
}

// Elements per chunk when one run is split across threads.
constexpr int64_t kReduceChunk = int64_t{1} << 16;

// Reduces [0, n) by chunk(begin, length) -> Acc over fixed chunks in parallel, then
// combines the partial results left to right.
template <class Acc, class Chunk, class Combine>
Acc reduce_chunked(int64_t n, Acc identity, const Chunk& chunk, const Combine& combine) {
  const int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  if (chunks <= 1) return chunk(0, n);
  std::vector<Acc> partial(static_cast<size_t>(chunks), identity);
  parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t begin = c * kReduceChunk;
      partial[static_cast<size_t>(c)] = chunk(begin, std::min(kReduceChunk, n - begin));
    }
  });
  Acc acc = partial[0];
  for (int64_t c = 1; c < chunks; ++c) acc = combine(acc, partial[static_cast<size_t>(c)]);
  return acc;
}

template <class P, class T>
typename P::Acc reduce_span_parallel(const P& policy, const T* p, int64_t n) {
  return reduce_chunked(
      n, P::identity(),
      [&](int64_t begin, int64_t length) { return reduce_span(policy, p + begin, length); },
      [](typename P::Acc a, typename P::Acc b) { return P::combine(a, b); });
}

// acc[w] = reduction over r of p[r * row_stride + w], for w in [0, width).
template <class P, class T>
void reduce_columns(const P& policy, const T* p, int64_t rows, int64_t row_stride, int64_t width,
                    typename P::Acc* acc) {
  for (int64_t w = 0; w < width; ++w) acc[w] = P::identity();
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = p + r * row_stride;
    for (int64_t w = 0; w < width; ++w) acc[w] = policy.add(acc[w], row[w]);
  }
}

// Columns handled together by one reduce_columns call.
constexpr int64_t kColumnBlock = 256;

// Whether a row-wise reduction should split single rows across threads.
inline bool split_rows_across_threads(int64_t rows, int64_t row_length) {
  return rows < num_threads() && row_length >= 2 * kReduceChunk;
}

// Rows handled per parallel task so that each task reads about 32K elements.
inline int64_t rows_per_task(int64_t row_length) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(row_length, 1));
}

// Runs a combinable reduction over layout's [outer, reduced, inner] block at x and
// writes finish(acc) for each output element, in out order.
template <class P, class T, class Out, class Finish>
void reduce_layout_with(const P& policy, const T* x, int64_t outer, int64_t reduced, int64_t inner,
                        Out* out, const Finish& finish) {
  if (inner == 1) {
    if (split_rows_across_threads(outer, reduced)) {
      for (int64_t o = 0; o < outer; ++o)
        out[o] = finish(reduce_span_parallel(policy, x + o * reduced, reduced));
      return;
    }
    parallel_for(0, outer, rows_per_task(reduced), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o)
        out[o] = finish(reduce_span(policy, x + o * reduced, reduced));
    });
    return;
  }
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, rows_per_task(reduced * kColumnBlock));
  parallel_for(0, outer * blocks, grain, [&](int64_t lo, int64_t hi) {
    typename P::Acc acc[kColumnBlock];
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t o = task / blocks, first = (task % blocks) * kColumnBlock;
      const int64_t width = std::min(kColumnBlock, inner - first);
      reduce_columns(policy, x + o * reduced * inner + first, reduced, inner, width, acc);
      Out* dst = out + o * inner + first;
      for (int64_t w = 0; w < width; ++w) dst[w] = finish(acc[w]);
    }
  });
}

}  // namespace kiln::cpu
