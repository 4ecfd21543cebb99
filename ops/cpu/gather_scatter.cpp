// CPU Gather and Scatter families (gather, scatter, scatter_add, index_add) along
// attrs.dim. Every index is checked before anything is written: one outside
// [0, size) throws kiln::IndexError ("[gather] index 7 is out of range for dim 0 with
// size 5"), a data-dependent check only the kernel can make. Inputs are read through
// their strides; scatters start from a copy of the input and then write (or add) the
// source in index order, so with repeated indices the last write wins (PyTorch leaves
// that case unspecified). Additions happen in compute_t (16-bit floats in float).
#include <type_traits>
#include <vector>

#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/error.h"

namespace kiln::cpu {
namespace {

std::vector<int64_t> checked_index(const OpCall& c, const Tensor& index_in, int64_t limit) {
  const Tensor index = kernel_contiguous(index_in, DType::Int64);
  const int64_t* p = index.data<int64_t>();
  std::vector<int64_t> values(p, p + index.numel());
  for (int64_t i : values) {
    KILN_CHECK(i >= 0 && i < limit, IndexError, "[", c.name(), "] index ", i,
               " is out of range for dim ", c.attrs.dim, " with size ", limit);
  }
  return values;
}

int64_t size_along(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.size(d); }
int64_t stride_along(const Tensor& t, int64_t d) { return t.dim() == 0 ? 0 : t.stride(d); }

// Calls f(p, offset) for each position p of shape in row-major order, with offset the
// element offset of p in a tensor of these strides, dim's coordinate taken as 0.
template <class F>
void for_each_position(const Dims& shape, const Dims& strides, int64_t dim, F&& f) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n == 0) return;
  Dims coord(shape.size(), 0);
  int64_t offset = 0;
  for (int64_t p = 0; p < n; ++p) {
    f(p, offset);
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t step = d == dim ? 0 : strides[d];
      if (++coord[d] < shape[d]) {
        offset += step;
        break;
      }
      offset -= step * (shape[d] - 1);
      coord[d] = 0;
    }
  }
}

template <class T>
void run_gather(const OpCall& c, const Tensor& out) {
  const Tensor& x = c.inputs[0];
  const int64_t dim = c.attrs.dim;
  const std::vector<int64_t> index = checked_index(c, c.inputs[1], size_along(x, dim));
  if (out.numel() == 0) return;
  const int64_t along = stride_along(x, dim);
  with_output(out, x.dtype(), [&](const Tensor& dst) {
    const T* src = x.data<T>();
    T* y = dst.data<T>();
    for_each_position(c.inputs[1].sizes(), x.strides(), dim, [&](int64_t p, int64_t offset) {
      y[p] = src[offset + index[static_cast<size_t>(p)] * along];
    });
  });
}

template <class T>
void run_scatter(const OpCall& c, const Tensor& out) {
  using C = compute_t<T>;
  const Tensor& x = c.inputs[0];
  const int64_t dim = c.attrs.dim;
  const std::vector<int64_t> index = checked_index(c, c.inputs[1], size_along(x, dim));
  if (out.numel() == 0) return;
  with_output(out, x.dtype(), [&](const Tensor& dst) {
    copy_converted(x, dst);
    T* y = dst.data<T>();
    const int64_t along = stride_along(dst, dim);
    if (c.op == OpId::IndexAdd) {
      const Tensor src = kernel_contiguous(c.inputs[2]);
      const DimSplit s = split_at_dim(src.sizes(), dim);
      const C alpha = c.scalars[0].to<C>();
      const T* v = src.data<T>();
      const int64_t dst_size = size_along(dst, dim);
      // Row by row of `inner` contiguous elements (an embedding's gradient: one row per
      // token), the inner loop a flat multiply-add the compiler vectorizes.
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t j = 0; j < s.size; ++j) {
          T* e = y + (o * dst_size + index[static_cast<size_t>(j)]) * s.inner;
          const T* a = v + (o * s.size + j) * s.inner;
          if constexpr (std::is_same_v<T, C>) {
            for (int64_t r = 0; r < s.inner; ++r) e[r] += alpha * a[r];
          } else {
            for (int64_t r = 0; r < s.inner; ++r)
              e[r] = to_element<T>(static_cast<C>(e[r]) + alpha * static_cast<C>(a[r]));
          }
        }
      return;
    }
    const bool add = c.op == OpId::ScatterAdd;
    const bool has_src = c.inputs.size() == 3;
    const T value = has_src ? T{} : to_element<T>(c.scalars[0].to<C>());
    const T* v = has_src ? c.inputs[2].data<T>() : nullptr;
    const Dims no_strides(c.inputs[1].dim(), 0);
    const Dims& src_strides = has_src ? c.inputs[2].strides() : no_strides;
    // Two walks in step: the destination offsets and the source offsets.
    std::vector<int64_t> dst_offsets(c.inputs[1].numel());
    for_each_position(c.inputs[1].sizes(), dst.strides(), dim, [&](int64_t p, int64_t offset) {
      dst_offsets[static_cast<size_t>(p)] = offset + index[static_cast<size_t>(p)] * along;
    });
    for_each_position(c.inputs[1].sizes(), src_strides, -1, [&](int64_t p, int64_t offset) {
      T& e = y[dst_offsets[static_cast<size_t>(p)]];
      const T s = has_src ? v[offset] : value;
      e = add ? to_element<T>(static_cast<C>(e) + static_cast<C>(s)) : s;
    });
  });
}

}  // namespace

void gather(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(), [&](auto tag) { run_gather<decltype(tag)>(call, out); });
}

void scatter(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(), [&](auto tag) { run_scatter<decltype(tag)>(call, out); });
}

}  // namespace kiln::cpu
