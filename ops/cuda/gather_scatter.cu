// CUDA Gather and Scatter families (gather, scatter, scatter_add, index_add) along
// attrs.dim, on packed (contiguous) copies of the inputs. The kernels check the index
// themselves, with no host sync (ops/cuda/bad_index.cuh): a bad entry is recorded and
// skipped (a gather writes a zero), and the next host read raises IndexError like the CPU
// kernel's, so the ops can be captured in a CUDA graph. gather runs a thread per output
// element. scatter: a thread per line (one position of every dim but dim) walks the index
// along dim in order, so repeated indices give the CPU's result (the last write wins).
// The additions (scatter_add, index_add) of float32 and float64 run a thread per source
// element with atomicAdd, as PyTorch's CUDA kernels do (an embedding's backward: thousands
// of indices into a few rows; a walk per line is serial over them): repeated indices sum
// in an unspecified order, within rounding of the CPU's index order. Other dtypes walk.
#include <algorithm>

#include "ops/cuda/bad_index.cuh"
#include "ops/cuda/common.cuh"

namespace kiln::cuda_impl {
namespace {

constexpr int kMaxRank = 12;

struct Shape {
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
};

Shape shape_of(const Dims& sizes, const char* op) {
  KILN_CHECK(sizes.size() <= static_cast<size_t>(kMaxRank), Error, "[", op,
             "] the CUDA kernel supports tensors of rank up to ", kMaxRank, ", got ", sizes.size());
  Shape s;
  s.rank = static_cast<int>(sizes.size());
  for (int d = 0; d < s.rank; ++d) s.sizes[d] = sizes[d];
  return s;
}

// The contiguous offset in a tensor of shape `to` of position p of shape `from`
// (same rank), with dim's coordinate replaced by `at`.
__device__ int64_t remap(const Shape& from, const Shape& to, int64_t p, int dim, int64_t at) {
  int64_t offset = 0, scale = 1;
  for (int d = from.rank - 1; d >= 0; --d) {
    const int64_t c = p % from.sizes[d];
    p /= from.sizes[d];
    offset += (d == dim ? at : c) * scale;
    scale *= to.sizes[d];
  }
  return offset;
}

__global__ void check_index_kernel(const int64_t* index, int64_t n, int64_t limit,
                                   BadIndexReport report) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (index[i] < 0 || index[i] >= limit) report_bad_index(report, index[i], limit);
}

// Checks an index that no kernel walks (nothing to write): records a bad entry, no sync.
void check_index_alone(const OpCall& c, const Tensor& index, int64_t limit, int device,
                       const BadIndexReport& report) {
  const int64_t n = index.numel();
  if (n == 0) return;
  check_index_kernel<<<grid_for(n, 256, 1, device), 256, 0, stream_of(device)>>>(
      index.data<int64_t>(), n, limit, report);
  cuda_context::check_last_launch(c.name());
}

template <class T>
__global__ void gather_kernel(T* out, const T* x, const int64_t* index, Shape index_shape,
                              Shape x_shape, int dim, int64_t n, BadIndexReport report) {
  const int64_t limit = x_shape.rank == 0 ? 1 : x_shape.sizes[dim];
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = index[p];
    if (at < 0 || at >= limit) {
      report_bad_index(report, at, limit);
      out[p] = T{};
      continue;
    }
    out[p] = x[remap(index_shape, x_shape, p, dim, at)];
  }
}

// Line l of index_shape with dim's extent taken out: walks j along dim in order.
template <class T, bool kAdd>
__global__ void scatter_kernel(T* out, const T* src, T value, const int64_t* index,
                               Shape index_shape, Shape src_shape, Shape out_shape, int dim,
                               int64_t lines, BadIndexReport report) {
  const int64_t len = index_shape.rank == 0 ? 1 : index_shape.sizes[dim];
  const int64_t limit = out_shape.rank == 0 ? 1 : out_shape.sizes[dim];
  Shape line_shape = index_shape;
  if (line_shape.rank > 0) line_shape.sizes[dim] = 1;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < lines;
       l += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t p = remap(line_shape, index_shape, l, dim, j);
      const int64_t at = index[p];
      if (at < 0 || at >= limit) {
        report_bad_index(report, at, limit);
        continue;
      }
      const int64_t o = remap(index_shape, out_shape, p, dim, at);
      const T v = src ? src[remap(index_shape, src_shape, p, -1, 0)] : value;
      out[o] = kAdd ? convert<T>(widen(out[o]) + widen(v)) : v;
    }
  }
}

// index_add: a thread per (outer, inner) position walks the index in order.
template <class T>
__global__ void index_add_kernel(T* out, const T* src, const int64_t* index, int64_t count,
                                 int64_t outer, int64_t size, int64_t inner, compute_t<T> alpha,
                                 BadIndexReport report) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, r = t % inner;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t at = index[j];
      if (at < 0 || at >= size) {
        report_bad_index(report, at, size);
        continue;
      }
      T& e = out[(o * size + at) * inner + r];
      e = convert<T>(widen(e) + alpha * widen(src[(o * count + j) * inner + r]));
    }
  }
}

template <class T>
constexpr bool kAtomicAdd = std::is_same_v<T, float> || std::is_same_v<T, double>;

// scatter_add: a thread per index element p adds src's element at p into out.
template <class T>
__global__ void scatter_add_atomic_kernel(T* out, const T* src, const int64_t* index,
                                          Shape index_shape, Shape src_shape, Shape out_shape,
                                          int dim, int64_t n, BadIndexReport report) {
  const int64_t limit = out_shape.rank == 0 ? 1 : out_shape.sizes[dim];
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = index[p];
    if (at < 0 || at >= limit) {
      report_bad_index(report, at, limit);
      continue;
    }
    atomicAdd(&out[remap(index_shape, out_shape, p, dim, at)],
              src[remap(index_shape, src_shape, p, -1, 0)]);
  }
}

// index_add: a thread per source element (o, j, r) adds alpha * src into row index[j].
template <class T>
__global__ void index_add_atomic_kernel(T* out, const T* src, const int64_t* index, int64_t count,
                                        int64_t n, int64_t size, int64_t inner, T alpha,
                                        BadIndexReport report) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = t % inner, j = (t / inner) % count, o = t / (inner * count);
    const int64_t at = index[j];
    if (at < 0 || at >= size) {
      report_bad_index(report, at, size);
      continue;
    }
    atomicAdd(&out[(o * size + at) * inner + r], alpha * src[t]);
  }
}

int64_t size_along(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.size(d); }

template <class T>
void run_gather(const OpCall& c, const Tensor& out) {
  const int device = out.device().index;
  DeviceScope scope(device);
  const Tensor x = packed(c.inputs[0]);
  const Tensor index = packed(c.inputs[1], DType::Int64);
  const BadIndexReport report = bad_index_report(c.name(), device, c.attrs.dim);
  if (out.numel() == 0) return;  // out has the index's shape: nothing to check
  with_packed_out(out, x.dtype(), c.name(), [&](const Tensor& o) {
    const int64_t n = o.numel();
    gather_kernel<T><<<grid_for(n, 256, 1, device), 256, 0, stream_of(device)>>>(
        o.data<T>(), x.data<T>(), index.data<int64_t>(), shape_of(index.sizes(), c.name()),
        shape_of(x.sizes(), c.name()), static_cast<int>(c.attrs.dim), n, report);
    cuda_context::check_last_launch(c.name());
  });
}

template <class T>
void run_scatter(const OpCall& c, const Tensor& out) {
  const int device = out.device().index;
  DeviceScope scope(device);
  const Tensor& x = c.inputs[0];
  const int64_t dim = c.attrs.dim;
  const Tensor index = packed(c.inputs[1], DType::Int64);
  const BadIndexReport report = bad_index_report(c.name(), device, dim);
  if (out.numel() == 0) {  // every index entry is out of range of an empty dim
    check_index_alone(c, index, size_along(x, dim), device, report);
    return;
  }
  with_packed_out(out, x.dtype(), c.name(), [&](const Tensor& o) {
    copy_convert(x, o, c.name());
    cudaStream_t st = stream_of(device);
    if (c.op == OpId::IndexAdd) {
      const Tensor src = packed(c.inputs[2]);
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < o.dim(); ++d) {
        if (d < dim) outer *= o.size(d);
        if (d > dim) inner *= o.size(d);
      }
      if constexpr (kAtomicAdd<T>) {
        const int64_t n = outer * index.numel() * inner;
        if (n > 0)
          index_add_atomic_kernel<T><<<grid_for(n, 256, 1, device), 256, 0, st>>>(
              o.data<T>(), src.data<T>(), index.data<int64_t>(), index.numel(), n,
              size_along(o, dim), inner, c.scalars[0].to<T>(), report);
        cuda_context::check_last_launch(c.name());
        return;
      }
      index_add_kernel<T><<<grid_for(outer * inner, 256, 1, device), 256, 0, st>>>(
          o.data<T>(), src.data<T>(), index.data<int64_t>(), index.numel(), outer,
          size_along(o, dim), inner, c.scalars[0].to<compute_t<T>>(), report);
      cuda_context::check_last_launch(c.name());
      return;
    }
    const bool has_src = c.inputs.size() == 3;
    const Tensor src = has_src ? packed(c.inputs[2]) : Tensor();
    const T value = has_src ? T{} : c.scalars[0].as<T>();
    const int64_t lines = index.numel() / std::max<int64_t>(size_along(index, dim), 1);
    if (index.numel() == 0) return;
    const Shape is = shape_of(index.sizes(), c.name()), os = shape_of(o.sizes(), c.name());
    const Shape ss = has_src ? shape_of(src.sizes(), c.name()) : is;
    const T* s = has_src ? src.data<T>() : nullptr;
    if constexpr (kAtomicAdd<T>) {
      if (c.op == OpId::ScatterAdd) {
        const int64_t n = index.numel();
        scatter_add_atomic_kernel<T><<<grid_for(n, 256, 1, device), 256, 0, st>>>(
            o.data<T>(), s, index.data<int64_t>(), is, ss, os, static_cast<int>(dim), n, report);
        cuda_context::check_last_launch(c.name());
        return;
      }
    }
    const int grid = grid_for(lines, 256, 1, device);
    if (c.op == OpId::ScatterAdd)
      scatter_kernel<T, true><<<grid, 256, 0, st>>>(o.data<T>(), s, value, index.data<int64_t>(),
                                                    is, ss, os, static_cast<int>(dim), lines,
                                                    report);
    else
      scatter_kernel<T, false><<<grid, 256, 0, st>>>(o.data<T>(), s, value, index.data<int64_t>(),
                                                     is, ss, os, static_cast<int>(dim), lines,
                                                     report);
    cuda_context::check_last_launch(c.name());
  });
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void gather(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(),
              [&](auto tag) { cuda_impl::run_gather<decltype(tag)>(call, out); });
}

void scatter(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(),
              [&](auto tag) { cuda_impl::run_scatter<decltype(tag)>(call, out); });
}

}  // namespace kiln::cuda
