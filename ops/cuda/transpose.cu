// Tiled transposing copies: the same-dtype strided copy whose destination is dense along
// one dim while the source is dense along another (x.t().contiguous(), permute +
// contiguous, the packing of permuted views). A plain element-wise copy reads one of the
// two sides with a large stride (a 32-byte sector per element); here each block moves a
// 32 x 32 tile through shared memory so that both the loads and the stores are coalesced.
// Other dims (after merging) are a batch walked through the offset calculator.
#include "ops/cuda/common.cuh"
#include "ops/cuda/pointwise.cuh"

namespace kiln::cuda_impl {
namespace {

constexpr int kTile = 32, kTileRows = 8;

struct TileGeom {
  int64_t size_a, size_b;  // a: dst-dense dim, b: src-dense dim
  int64_t src_stride_a;    // src stride of a (its stride of b is 1)
  int64_t dst_stride_b;    // dst stride of b (its stride of a is 1)
  int64_t batches;
};

template <class E>
__global__ void __launch_bounds__(kTile* kTileRows)
    transpose_copy_kernel(E* dst, const E* src, TileGeom g, StridedIndexer<2> batch) {
  __shared__ E tile[kTile][kTile + 1];
  const int64_t a0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int64_t z = blockIdx.z; z < g.batches; z += gridDim.z) {
    int64_t off[2];
    batch.offsets(z, off);
    const E* s = src + off[1];
    E* d = dst + off[0];
#pragma unroll
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t a = a0 + i, b = b0 + threadIdx.x;
      if (a < g.size_a && b < g.size_b) tile[i][threadIdx.x] = s[a * g.src_stride_a + b];
    }
    __syncthreads();
#pragma unroll
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t b = b0 + i, a = a0 + threadIdx.x;
      if (a < g.size_a && b < g.size_b) d[b * g.dst_stride_b + a] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

template <int Bytes>
struct Bits;
template <>
struct Bits<1> {
  using type = uint8_t;
};
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

}  // namespace

bool try_transpose_copy(const Tensor& src, const Tensor& dst, const char* op) {
  if (src.dtype() != dst.dtype() || dst.numel() < kTile * kTile) return false;
  // Merged dims (innermost first) of the copy.
  const StridedIndexer<2> ix =
      make_indexer<2>(dst.sizes(), {dst.strides(), broadcast_strides(src, dst.sizes())}, op);
  if (ix.ndim < 2 || ix.strides[0][0] != 1 || ix.strides[1][0] == 1) return false;
  int j = -1;
  for (int d = 1; d < ix.ndim; ++d) {
    if (ix.strides[1][d] == 1) j = d;
  }
  if (j < 0 || ix.sizes[0] < 8 || ix.sizes[j] < 8) return false;
  TileGeom g{ix.sizes[0], ix.sizes[j], ix.strides[1][0], ix.strides[0][j], 1};
  const int64_t tiles_a = (g.size_a + kTile - 1) / kTile, tiles_b = (g.size_b + kTile - 1) / kTile;
  if (tiles_a > 0x7fffffff || tiles_b > 65535) return false;
  // The batch: every other merged dim, outermost first as make_indexer expects.
  Dims sizes;
  std::array<Dims, 2> strides;
  for (int d = ix.ndim - 1; d >= 1; --d) {
    if (d == j) continue;
    sizes.push_back(ix.sizes[d]);
    strides[0].push_back(ix.strides[0][d]);
    strides[1].push_back(ix.strides[1][d]);
  }
  g.batches = dims_numel(sizes);
  const StridedIndexer<2> batch = make_indexer<2>(sizes, strides, op);
  const int device = dst.device().index;
  DeviceScope scope(device);
  const dim3 grid(static_cast<unsigned>(tiles_a), static_cast<unsigned>(tiles_b),
                  static_cast<unsigned>(g.batches < 65535 ? g.batches : 65535));
  const dim3 block(kTile, kTileRows);
  auto go = [&](auto tag) {
    using E = decltype(tag);
    transpose_copy_kernel<E><<<grid, block, 0, stream_of(device)>>>(
        static_cast<E*>(dst.data_ptr()), static_cast<const E*>(src.data_ptr()), g, batch);
  };
  switch (dst.element_size()) {
    case 1:
      go(Bits<1>::type{});
      break;
    case 2:
      go(Bits<2>::type{});
      break;
    case 4:
      go(Bits<4>::type{});
      break;
    default:
      go(Bits<8>::type{});
      break;
  }
  cuda_context::check_last_launch(op);
  return true;
}

}  // namespace kiln::cuda_impl
