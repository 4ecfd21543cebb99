#include "ops/cpu/reduce_layout.h"

#include <algorithm>
#include <vector>

#include "ops/kernels.h"

namespace kiln::cpu {
namespace {

struct DimRun {
  bool reduced;
  int64_t size;
};

// The dims of x in memory order (largest stride first, size-1 dims left out) when x
// covers its memory densely, i.e. is a permutation of a contiguous tensor; empty
// otherwise (expanded, stepped or empty tensors). Returns false for those.
bool dense_memory_order(const Tensor& x, std::vector<int64_t>* order) {
  if (x.numel() == 0) return false;
  order->clear();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.size(d) != 1) order->push_back(d);
  std::stable_sort(order->begin(), order->end(),
                   [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
  int64_t expected = 1;
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    if (x.stride(*it) != expected) return false;
    expected *= x.size(*it);
  }
  return true;
}

// Merges neighbouring dims (in memory order) of the same kind into runs; valid for a
// dense tensor, where neighbours in memory order always merge.
std::vector<DimRun> merge_runs(const Tensor& x, const std::vector<int64_t>& order,
                               const std::vector<bool>& reduced) {
  std::vector<DimRun> runs;
  for (int64_t d : order) {
    if (!runs.empty() && runs.back().reduced == reduced[d]) {
      runs.back().size *= x.size(d);
    } else {
      runs.push_back({reduced[d], x.size(d)});
    }
  }
  return runs;
}

// Whether the dims of one kind (kept, or reduced) appear in memory order in their
// logical order. Kept dims must, so that outputs come out in row-major order; reduced
// dims must when the position within the reduced block matters (flattened argmax).
bool in_logical_order(const std::vector<int64_t>& order, const std::vector<bool>& reduced,
                      bool kind) {
  int64_t last = -1;
  for (int64_t d : order) {
    if (reduced[d] != kind) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

// Fills layout from runs shaped [kept?][reduced?][kept?]; false for any other shape.
bool layout_from_runs(const std::vector<DimRun>& runs, ReduceLayout* layout) {
  int reduced_runs = 0;
  for (const DimRun& run : runs) reduced_runs += run.reduced ? 1 : 0;
  if (reduced_runs > 1 || runs.size() > 3) return false;
  if (runs.size() == 3 && !runs[1].reduced) return false;
  bool seen_reduced = false;
  for (const DimRun& run : runs) {
    if (run.reduced) {
      layout->reduced = run.size;
      seen_reduced = true;
    } else if (seen_reduced) {
      layout->inner = run.size;
    } else {
      layout->outer = run.size;
    }
  }
  return true;
}

}  // namespace

ReduceInput prepare_reduce_input(const Tensor& x, const Dims& dims, bool positions_matter) {
  const Dims& sizes = x.sizes();
  std::vector<bool> reduced(sizes.size(), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;

  ReduceInput input;
  std::vector<int64_t> order;
  if (dense_memory_order(x, &order) && in_logical_order(order, reduced, false) &&
      (!positions_matter || in_logical_order(order, reduced, true)) &&
      layout_from_runs(merge_runs(x, order, reduced), &input.layout)) {
    input.data = x;
    return input;
  }

  // Kept dims first, reduced dims last, then one packing copy.
  Dims order_sizes, order_strides;
  input.layout = ReduceLayout{};
  for (int pass = 0; pass < 2; ++pass) {
    const bool want_reduced = pass == 1;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (reduced[d] != want_reduced) continue;
      order_sizes.push_back(sizes[d]);
      order_strides.push_back(x.strides()[d]);
      (want_reduced ? input.layout.reduced : input.layout.outer) *= sizes[d];
    }
  }
  Tensor permuted =
      Tensor::make_view(x.storage(), order_sizes, order_strides, x.storage_offset(), x.dtype());
  input.data = kernel_contiguous(permuted);
  return input;
}

}  // namespace kiln::cpu
