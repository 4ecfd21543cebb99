// cat(tensors, attrs.dim). When out and every input are contiguous with out's dtype, one
// kernel copies up to kChunk inputs per launch (clip_grad_norm_'s stack of one norm per
// parameter is one launch, not one per parameter); otherwise each input is copied
// (converted to out's dtype, any strides) into its slice of out along dim.
#include "ops/cuda/common.cuh"

namespace kiln::cuda {
namespace {

constexpr int kChunk = 64;

// Out viewed as [outer, width] (width = out's size along dim times the inner size); input
// i fills columns [start[i], start[i + 1]) of columns [first, first + start[n]).
struct CatChunk {
  const void* src[kChunk];
  int64_t start[kChunk + 1];
  int n;
};

template <class W>
__global__ void cat_contiguous_kernel(CatChunk c, W* out, int64_t outer, int64_t width,
                                      int64_t first) {
  const int64_t cols = c.start[c.n], total = outer * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const int64_t o = e / cols, col = e - o * cols;
    int lo = 0, hi = c.n - 1;  // the input whose columns hold col
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (c.start[mid] <= col)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t w = c.start[lo + 1] - c.start[lo];
    out[o * width + first + col] = static_cast<const W*>(c.src[lo])[o * w + (col - c.start[lo])];
  }
}

template <class W>
void cat_contiguous(const OpCall& call, const Tensor& out, int64_t inner) {
  const int64_t dim = call.attrs.dim;
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
  const int64_t width = out.size(dim) * inner;
  const int device = out.device().index;
  int64_t first = 0;
  size_t i = 0;
  while (i < call.inputs.size()) {
    CatChunk c{};
    const int64_t chunk_first = first;
    for (; i < call.inputs.size() && c.n < kChunk; ++i) {
      const Tensor& t = call.inputs[i];
      const int64_t cols = t.size(dim) * inner;
      if (cols == 0) continue;
      c.src[c.n] = t.data_ptr();
      c.start[c.n + 1] = c.start[c.n] + cols;
      ++c.n;
      first += cols;
    }
    if (c.n == 0) break;
    const int64_t n = outer * c.start[c.n];
    cat_contiguous_kernel<W>
        <<<cuda_impl::grid_for(n, 256, 4, device), 256, 0, cuda_impl::stream_of(device)>>>(
            c, static_cast<W*>(out.data_ptr()), outer, width, chunk_first);
    cuda_impl::check(cudaGetLastError(), call.name(), "the cat kernel launch");
  }
}

}  // namespace

void cat(const OpCall& call, const Tensor& out) {
  const int64_t dim = call.attrs.dim;
  bool contiguous = out.is_contiguous() && call.inputs.size() > 1 && out.numel() > 0;
  for (const Tensor& t : call.inputs)
    contiguous = contiguous && t.is_contiguous() && t.dtype() == out.dtype();
  if (contiguous) {
    int64_t inner = 1;
    for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
    cuda_impl::DeviceScope scope(out.device().index);
    switch (itemsize(out.dtype())) {
      case 1:
        return cat_contiguous<uint8_t>(call, out, inner);
      case 2:
        return cat_contiguous<uint16_t>(call, out, inner);
      case 4:
        return cat_contiguous<uint32_t>(call, out, inner);
      case 8:
        return cat_contiguous<uint64_t>(call, out, inner);
      default:
        break;
    }
  }
  int64_t pos = 0;
  for (const Tensor& t : call.inputs) {
    const int64_t len = t.size(dim);
    if (t.numel() > 0) {
      Tensor slice = Tensor::make_view(out.storage(), t.sizes(), out.strides(),
                                       out.storage_offset() + pos * out.stride(dim), out.dtype());
      cuda_impl::copy_convert(t, slice, call.name());
    }
    pos += len;
  }
}

}  // namespace kiln::cuda
