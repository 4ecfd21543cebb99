// The per-row sampling of multinomial, shared by the CPU and CUDA kernels so both draw
// the same samples for the same (seed, offset): Philox uniforms (ops/philox.h), counter
// row * stride + j.
//  - with replacement: sample j is the first category whose running sum of probs
//    exceeds u_j * total (inverse CDF, in double);
//  - without replacement: each category with p > 0 gets the key -log(1 - u)/p (an
//    exponential race, Efraimidis-Spirakis) and the num_samples smallest keys win, in
//    key order (successive weighted draws without replacement).
// check_row reports a row PyTorch refuses: a negative, infinite or NaN probability, a
// zero total, or fewer positive categories than samples drawn without replacement.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/philox.h"
#include "runtime/macros.h"

namespace kiln::sample {

enum RowError : int { kRowOk = 0, kBadProbability = 1, kZeroTotal = 2, kTooFewCategories = 3 };

template <class Load>
KILN_HD int check_row(Load p, int64_t n, int64_t samples, bool replacement) {
  double total = 0;
  int64_t positive = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = p(i);
    if (!(v >= 0) || v == INFINITY) return kBadProbability;
    total += v;
    positive += v > 0;
  }
  if (!(total > 0)) return kZeroTotal;
  if (!replacement && positive < samples) return kTooFewCategories;
  return kRowOk;
}

// Writes `samples` category indices of one row into out[0 .. samples).
// keys: scratch of n doubles (without replacement only).
template <class Load>
KILN_HD void draw_row(Load p, int64_t n, int64_t samples, bool replacement, uint64_t seed,
                      uint64_t offset, uint64_t counter_base, double* keys, int64_t* out) {
  if (replacement) {
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += p(i);
    for (int64_t j = 0; j < samples; ++j) {
      const double target = philox::rand_value(seed, offset, counter_base + j) * total;
      double running = 0;
      int64_t pick = -1;
      for (int64_t i = 0; i < n; ++i) {
        const double v = p(i);
        running += v;
        if (v > 0) pick = i;  // the last positive category: a guard against rounding
        if (v > 0 && running > target) break;
      }
      out[j] = pick;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = p(i);
    const double u = philox::rand_value(seed, offset, counter_base + i);
    keys[i] = v > 0 ? -::log(1.0 - u) / v : INFINITY;
  }
  for (int64_t j = 0; j < samples; ++j) {  // selection: the j-th smallest key
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
      if (keys[i] != -1.0 && (best < 0 || keys[i] < keys[best])) best = i;
    out[j] = best;
    keys[best] = -1.0;  // taken (keys are never negative otherwise)
  }
}

inline const char* row_error_text(int e) {
  switch (e) {
    case kBadProbability:
      return "probability tensor contains either inf, nan or element < 0";
    case kZeroTotal:
      return "invalid multinomial distribution (sum of probabilities <= 0)";
    case kTooFewCategories:
      return "invalid multinomial distribution (with replacement=False, not enough "
             "non-negative category to sample)";
    default:
      return "";
  }
}

}  // namespace kiln::sample
