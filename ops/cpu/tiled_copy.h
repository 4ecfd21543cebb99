// Converting copy between layouts whose contiguous dims differ (x.t().contiguous(),
// permute + contiguous): walking the output in order would read the input one cache
// line per element, so the two dims that are contiguous in the output and in the input
// are walked in square tiles, keeping both sides' cache lines live across a tile.
#pragma once

#include <cstdint>

#include "ops/cpu/convert.h"
#include "ops/cpu/loops.h"

namespace kiln::cpu {

// loop: operand 0 the output, operand 1 the input (see make_loop). Copies with convert
// and returns true when tiling pays off; returns false (nothing done) otherwise.
bool tiled_convert(const StridedLoop& loop, int64_t input_item, ConvertFn convert);

}  // namespace kiln::cpu
