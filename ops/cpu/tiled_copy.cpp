// tiled_convert(): see ops/cpu/tiled_copy.h.
#include "ops/cpu/tiled_copy.h"

#include <algorithm>

namespace kiln::cpu {
namespace {

constexpr int64_t kTile = 32;
constexpr int64_t kMinTiledSize = 8;

}  // namespace

bool tiled_convert(const StridedLoop& original, int64_t input_item, ConvertFn convert) {
  // Dim 0 is the output's innermost dim; find the input's.
  if (original.rank < 2 || original.strides[0][1] == input_item) return false;
  int input_inner = -1;
  for (int d = 1; d < original.rank && input_inner < 0; ++d)
    if (original.strides[d][1] == input_item) input_inner = d;
  if (input_inner < 0 || original.sizes[0] < kMinTiledSize ||
      original.sizes[input_inner] < kMinTiledSize)
    return false;

  StridedLoop loop = original;
  loop_detail::swap_dims(loop, 1, input_inner);  // element order is irrelevant to a copy
  const int64_t n0 = loop.sizes[0], n1 = loop.sizes[1];
  const int64_t out_s0 = loop.strides[0][0], out_s1 = loop.strides[1][0];
  const int64_t in_s0 = loop.strides[0][1], in_s1 = loop.strides[1][1];
  int64_t outer = 1;
  for (int d = 2; d < loop.rank; ++d) outer *= loop.sizes[d];
  const int64_t row_blocks = (n1 + kTile - 1) / kTile;
  // A work unit is kTile rows of dim 1 across all of dim 0, for one outer index.
  const int64_t grain = std::max<int64_t>(1, kPointwiseGrain / (kTile * n0));

  parallel_for(0, outer * row_blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      int64_t rest = unit / row_blocks;
      const int64_t row0 = (unit % row_blocks) * kTile;
      const int64_t rows = std::min(kTile, n1 - row0);
      const char* src = loop.base[1];
      char* dst = loop.base[0];
      for (int d = 2; d < loop.rank; ++d) {
        const int64_t i = rest % loop.sizes[d];
        rest /= loop.sizes[d];
        src += i * loop.strides[d][1];
        dst += i * loop.strides[d][0];
      }
      for (int64_t col0 = 0; col0 < n0; col0 += kTile) {
        const int64_t cols = std::min(kTile, n0 - col0);
        for (int64_t r = row0; r < row0 + rows; ++r)
          convert(src + r * in_s1 + col0 * in_s0, in_s0, dst + r * out_s1 + col0 * out_s0, out_s0,
                  cols);
      }
    }
  });
  return true;
}

}  // namespace kiln::cpu
