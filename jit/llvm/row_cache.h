// The row cache of the LLVM row kernels (jit/llvm/codegen.cpp). A row kernel makes one
// pass over a row per reduction stage, then one for the stores; a costly node (a
// transcendental call) that more than one pass evaluates, such as softmax's
// exp(x - max) (the sum's pass and the output's), is computed once per row instead: the
// first pass that evaluates it stores it in a row buffer on the stack, the later ones
// load it. Rows longer than kRowCacheCols compute it again (the emitter makes a second,
// uncached copy of the row loops and picks one at run time).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "jit/kernel_ir.h"

namespace kiln::jit::llvm_backend {

constexpr int64_t kRowCacheCols = 16384;
constexpr size_t kMostRowCached = 2;  // buffers per kernel at most

// Per pass of a row kernel, in order (each stage that has reductions, then the stores'
// pass), the nodes its element loop evaluates first: the reductions' inputs, then the
// Full-level stored nodes.
std::vector<std::vector<int>> row_pass_roots(const Kernel& k);

// The nodes to cache, each with the pass (an index into `roots`) that first evaluates it.
std::map<int, int> choose_row_cache(const Kernel& k, const std::vector<std::vector<int>>& roots);

}  // namespace kiln::jit::llvm_backend
