// Strided element-wise iteration for the CPU pointwise kernels.
//
// A StridedLoop describes one output and up to three inputs walked together in the
// output's shape: inputs are broadcast to it (missing or size-1 dims get stride 0),
// constant operands have stride 0 everywhere, size-1 dims are dropped, dims are put in
// the output's memory order and adjacent dims that are contiguous for every operand are
// merged. Dims are stored innermost first, strides in bytes.
//
// run_range() walks a range of the loop's linear index and hands each innermost run to
// inner(char* const ptrs[], const int64_t strides[], int64_t n); parallel_loop() splits
// the whole index space across threads (nothing is allocated unless it does split).
// When every tensor is contiguous with the output's element count, make_loop() takes a
// shortcut and builds a 1-D loop directly.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/error.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"

namespace kiln::cpu {

constexpr int kMaxLoopDims = 25;     // after dropping size-1 dims and coalescing (PyTorch: 25)
constexpr int kMaxLoopOperands = 4;  // out + 3 inputs (where)
// Elements per parallel chunk: below this, work runs inline on the calling thread.
constexpr int64_t kPointwiseGrain = 32768;

// One operand of a loop: a tensor view, or a single value repeated everywhere.
struct LoopOperand {
  char* data = nullptr;
  const Tensor* tensor = nullptr;  // null: a constant at data (all strides 0)

  static LoopOperand of(const Tensor& t) { return {static_cast<char*>(t.data_ptr()), &t}; }
  static LoopOperand constant(const void* value) {
    return {static_cast<char*>(const_cast<void*>(value)), nullptr};
  }
};

struct StridedLoop {
  int num_operands = 0;
  int rank = 1;
  int64_t numel = 0;
  int64_t sizes[kMaxLoopDims];
  int64_t strides[kMaxLoopDims][kMaxLoopOperands];  // [dim][operand], bytes
  char* base[kMaxLoopOperands];
};

namespace loop_detail {

inline bool all_contiguous_like(const LoopOperand* ops, int n, int64_t numel) {
  for (int k = 0; k < n; ++k) {
    const Tensor* t = ops[k].tensor;
    if (t && (!t->is_contiguous() || t->numel() != numel)) return false;
  }
  return true;
}

inline void swap_dims(StridedLoop& loop, int a, int b) {
  std::swap(loop.sizes[a], loop.sizes[b]);
  for (int k = 0; k < loop.num_operands; ++k) std::swap(loop.strides[a][k], loop.strides[b][k]);
}

// Stable insertion sort of the dims by the output's stride, innermost (smallest) first.
inline void order_by_output_strides(StridedLoop& loop) {
  for (int i = 1; i < loop.rank; ++i)
    for (int j = i; j > 0 && loop.strides[j - 1][0] > loop.strides[j][0]; --j)
      swap_dims(loop, j - 1, j);
}

// Merges dim j into the run kept at w when every operand steps through them as one.
inline void coalesce(StridedLoop& loop) {
  int w = 0;
  for (int j = 1; j < loop.rank; ++j) {
    bool mergeable = true;
    for (int k = 0; k < loop.num_operands && mergeable; ++k)
      mergeable = loop.strides[j][k] == loop.strides[w][k] * loop.sizes[w];
    if (mergeable) {
      loop.sizes[w] *= loop.sizes[j];
    } else {
      ++w;
      loop.sizes[w] = loop.sizes[j];
      for (int k = 0; k < loop.num_operands; ++k) loop.strides[w][k] = loop.strides[j][k];
    }
  }
  loop.rank = w + 1;
}

}  // namespace loop_detail

// ops[0] is the output (a tensor); the others are inputs broadcastable to its shape.
inline StridedLoop make_loop(const Tensor& out, const LoopOperand* ops, int num_operands) {
  StridedLoop loop;
  loop.num_operands = num_operands;
  loop.numel = out.numel();
  for (int k = 0; k < num_operands; ++k) loop.base[k] = ops[k].data;

  if (loop_detail::all_contiguous_like(ops, num_operands, loop.numel)) {
    loop.rank = 1;
    loop.sizes[0] = loop.numel;
    for (int k = 0; k < num_operands; ++k)
      loop.strides[0][k] = ops[k].tensor ? ops[k].tensor->element_size() : 0;
    return loop;
  }

  const Dims& out_sizes = out.sizes();
  const int64_t out_rank = static_cast<int64_t>(out_sizes.size());
  int rank = 0;
  for (int64_t d = out_rank - 1; d >= 0; --d) {
    if (out_sizes[d] == 1) continue;
    KILN_CHECK(rank < kMaxLoopDims, Error, "[pointwise] more than ", kMaxLoopDims,
               " non-mergeable dims in output of shape ", dims_str(out_sizes));
    loop.sizes[rank] = out_sizes[d];
    for (int k = 0; k < num_operands; ++k) {
      int64_t stride = 0;
      if (const Tensor* t = ops[k].tensor) {
        const int64_t td = d - (out_rank - t->dim());
        if (td >= 0 && t->sizes()[td] != 1) stride = t->strides()[td] * t->element_size();
      }
      loop.strides[rank][k] = stride;
    }
    ++rank;
  }
  if (rank == 0) {  // every dim has size 1
    loop.rank = 1;
    loop.sizes[0] = 1;
    for (int k = 0; k < num_operands; ++k) loop.strides[0][k] = 0;
    return loop;
  }
  loop.rank = rank;
  loop_detail::order_by_output_strides(loop);
  loop_detail::coalesce(loop);
  return loop;
}

// Calls inner(ptrs, strides, n) for each innermost run of linear indices [begin, end).
template <class Inner>
void run_range(const StridedLoop& loop, int64_t begin, int64_t end, Inner& inner) {
  const int nops = loop.num_operands;
  int64_t index[kMaxLoopDims];
  char* ptrs[kMaxLoopOperands];
  for (int k = 0; k < nops; ++k) ptrs[k] = loop.base[k];
  if (begin == 0) {
    for (int d = 0; d < loop.rank; ++d) index[d] = 0;
  } else {
    int64_t rest = begin;
    for (int d = 0; d < loop.rank; ++d) {
      index[d] = rest % loop.sizes[d];
      rest /= loop.sizes[d];
      for (int k = 0; k < nops; ++k) ptrs[k] += index[d] * loop.strides[d][k];
    }
  }
  const int64_t* inner_strides = loop.strides[0];
  while (begin < end) {
    const int64_t n = std::min(loop.sizes[0] - index[0], end - begin);
    inner(ptrs, inner_strides, n);
    begin += n;
    if (begin >= end) break;
    index[0] += n;
    for (int k = 0; k < nops; ++k) ptrs[k] += n * inner_strides[k];
    for (int d = 0; d + 1 < loop.rank && index[d] == loop.sizes[d]; ++d) {
      index[d] = 0;
      ++index[d + 1];
      for (int k = 0; k < nops; ++k)
        ptrs[k] += loop.strides[d + 1][k] - loop.sizes[d] * loop.strides[d][k];
    }
  }
}

// Runs body(begin, end) over the loop's index space, across threads when it is large.
template <class Body>
void parallel_loop(const StridedLoop& loop, int64_t grain, Body&& body) {
  parallel_for(0, loop.numel, grain, body);
}

}  // namespace kiln::cpu
