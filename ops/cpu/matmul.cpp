// CPU Matmul (torch.matmul semantics) and Linear (x @ weight^T + bias) on the GEMM of
// ops/cpu/blas_gemm.h (oneDNN for float32 when present, else OpenBLAS).
//
// Both compute in float32 or float64; 16-bit inputs are converted to float32 and the
// result is converted back (ops/cpu/kernel_io.h with_output). Operands are handed to
// BLAS through their strides (ops/cpu/blas_gemm.h), so transposed views are not copied;
// only operands BLAS cannot read (expanded or irregular strides) are packed.
//
// Matmul: a 1-D left operand is a [1, k] row, a 1-D right operand a [k, 1] column; the
// leading dims broadcast as batch dims. When the right operand is the same matrix for
// every batch entry and the left operand's batch and row dims collapse into one
// stride, the whole batch runs as a single GEMM; otherwise one GEMM per batch entry,
// each read in place through its strides (attention's q @ k^T on 4-D views: k^T goes
// to BLAS as a transpose). Entries are spread over kiln's threads, one single-threaded
// GEMM each, when there are enough of them to share out evenly; only a batch of a few
// large entries splits each GEMM over the threads (ops/cpu/blas_gemm.h). Linear
// flattens x's leading dims into one GEMM and starts C from the bias.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/blas_gemm.h"
#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

// Whether dims (sizes, strides) collapse into one dim of stride *merged_stride: each
// dim's stride is the next one's stride times its size (size-1 dims do not count).
bool collapse_dims(const Dims& sizes, const Dims& strides, int64_t* merged_stride) {
  int64_t stride = 1, extent = 1;
  bool any = false;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (!any) {
      stride = strides[d];
      any = true;
    } else if (strides[d] != stride * extent) {
      return false;
    }
    extent *= sizes[d];
  }
  *merged_stride = stride;
  return true;
}

Tensor in_dtype(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : kernel_contiguous(t, dtype);
}

// One matmul operand: its matrix (per batch entry) and its batch strides aligned to
// the output's batch dims (0 where it broadcasts).
struct BatchedOperand {
  Tensor owner;
  GemmOperand matrix;
  Dims batch_strides;
};

GemmOperand matrix_of(const Tensor& t, bool is_left) {
  GemmOperand m;
  m.data = t.data_ptr();
  if (t.dim() == 1) {  // a row [1, k] on the left, a column [k, 1] on the right
    m.rows = is_left ? 1 : t.size(0);
    m.cols = is_left ? t.size(0) : 1;
    m.row_stride = is_left ? 0 : t.stride(0);
    m.col_stride = is_left ? t.stride(0) : 0;
  } else {
    m.rows = t.size(-2);
    m.cols = t.size(-1);
    m.row_stride = t.stride(-2);
    m.col_stride = t.stride(-1);
  }
  return m;
}

BatchedOperand describe_operand(const Tensor& t, bool is_left, const Dims& out_batch) {
  BatchedOperand op;
  op.owner = t;
  op.matrix = matrix_of(t, is_left);
  if (!gemm_can_read(op.matrix)) {
    op.owner = kernel_contiguous(t);
    op.matrix = matrix_of(op.owner, is_left);
  }
  const int64_t rank = static_cast<int64_t>(out_batch.size());
  const int64_t own_rank = std::max<int64_t>(op.owner.dim() - 2, 0);
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t d = i - (rank - own_rank);
    const bool broadcast = d < 0 || op.owner.size(d) == 1;
    op.batch_strides.push_back(broadcast ? 0 : op.owner.stride(d));
  }
  return op;
}

// Element offsets of each batch entry, in row-major order of the batch dims.
std::vector<int64_t> batch_offsets(const Dims& batch, const Dims& strides) {
  const int64_t count = dims_numel(batch);
  std::vector<int64_t> offsets(static_cast<size_t>(count), 0);
  Dims index(batch.size(), 0);
  int64_t offset = 0;
  for (int64_t b = 0; b < count; ++b) {
    offsets[static_cast<size_t>(b)] = offset;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      offset += strides[d];
      if (++index[d] < batch[d]) break;
      offset -= strides[d] * index[d];
      index[d] = 0;
    }
  }
  return offsets;
}

GemmOperand at_offset(GemmOperand m, int64_t offset, int64_t element) {
  m.data = static_cast<const char*>(m.data) + offset * element;
  return m;
}

void matmul_into(const Tensor& a_in, const Tensor& b_in, const Tensor& dst) {
  const DType dtype = dst.dtype();
  const int64_t element = itemsize(dtype);
  const Tensor a_t = in_dtype(a_in, dtype), b_t = in_dtype(b_in, dtype);
  const int64_t batch_rank = dst.dim() - (a_t.dim() >= 2 ? 1 : 0) - (b_t.dim() >= 2 ? 1 : 0);
  const Dims out_batch(dst.sizes().begin(), dst.sizes().begin() + batch_rank);
  const BatchedOperand a = describe_operand(a_t, true, out_batch);
  const BatchedOperand b = describe_operand(b_t, false, out_batch);
  const int64_t m = a.matrix.rows, n = b.matrix.cols, k = a.matrix.cols;
  char* c = static_cast<char*>(dst.data_ptr());

  // The same right matrix for every batch entry: fold the batch into the rows of A.
  const bool shared_right =
      std::all_of(b.batch_strides.begin(), b.batch_strides.end(), [](int64_t s) { return s == 0; });
  if (shared_right) {
    Dims sizes = out_batch, strides = a.batch_strides;
    sizes.push_back(m);
    strides.push_back(a.matrix.row_stride);
    GemmOperand folded = a.matrix;
    folded.rows = dims_numel(out_batch) * m;
    if (collapse_dims(sizes, strides, &folded.row_stride) && gemm_can_read(folded)) {
      gemm(dtype, folded, b.matrix, c, n, false);
      return;
    }
  }

  const std::vector<int64_t> a_offsets = batch_offsets(out_batch, a.batch_strides);
  const std::vector<int64_t> b_offsets = batch_offsets(out_batch, b.batch_strides);
  const int64_t batch = static_cast<int64_t>(a_offsets.size());
  const int64_t work = std::max<int64_t>(m * n * k, 1);
  auto run_entries = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      gemm(dtype, at_offset(a.matrix, a_offsets[static_cast<size_t>(i)], element),
           at_offset(b.matrix, b_offsets[static_cast<size_t>(i)], element), c + i * m * n * element,
           n, false);
    }
  };
  const int64_t threads = num_threads();
  if (work <= kSplitGemmWork) {
    parallel_for(0, batch, std::max<int64_t>(1, kSplitGemmWork / work), run_entries);
  } else if (batch >= threads && (batch % threads == 0 || batch >= 4 * threads)) {
    // Whole entries per thread, one single-threaded GEMM each: one pool wake-up per
    // matmul instead of one per entry, and no GEMM split into thin blocks.
    parallel_for(0, batch, (batch + threads - 1) / threads, run_entries);
  } else {
    run_entries(0, batch);  // few large entries: each GEMM is split over the threads
  }
}

template <class T>
void fill_rows_with(T* c, int64_t rows, const T* row, int64_t width) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(c + r * width, row, static_cast<size_t>(width) * sizeof(T));
}

void linear_into(const OpCall& call, const Tensor& dst) {
  const DType dtype = dst.dtype();
  const Tensor x = in_dtype(call.inputs[0], dtype);
  const Tensor weight = in_dtype(call.inputs[1], dtype);
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  const Dims leading(x.sizes().begin(), x.sizes().end() - 1);
  const Dims leading_strides(x.strides().begin(), x.strides().end() - 1);

  GemmOperand a{x.data_ptr(), dims_numel(leading), in_features, 0, x.stride(-1)};
  Tensor x_owner = x;
  if (!collapse_dims(leading, leading_strides, &a.row_stride) || !gemm_can_read(a)) {
    x_owner = kernel_contiguous(x);
    a = GemmOperand{x_owner.data_ptr(), dims_numel(leading), in_features, in_features, 1};
  }
  // B = weight^T: [in, out] with the weight's strides swapped.
  GemmOperand b{weight.data_ptr(), in_features, out_features, weight.stride(1), weight.stride(0)};
  Tensor weight_owner = weight;
  if (!gemm_can_read(b)) {
    weight_owner = kernel_contiguous(weight);
    b = GemmOperand{weight_owner.data_ptr(), in_features, out_features, 1, in_features};
  }

  const bool has_bias = call.inputs.size() >= 3 && call.inputs[2].defined();
  if (has_bias) {
    const Tensor bias = kernel_contiguous(call.inputs[2], dtype);
    visit_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T>)
        fill_rows_with(dst.data<T>(), a.rows, bias.data<T>(), out_features);
    });
  }
  gemm(dtype, a, b, dst.data_ptr(), out_features, has_bias);
}

DType natural_dtype(const OpCall& call) {
  DType d = call.inputs[0].dtype();
  for (const Tensor& t : call.inputs)
    if (t.defined()) d = promote_types(d, t.dtype());
  return d;
}

}  // namespace

void matmul(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  with_output(out, compute_dtype(natural_dtype(call)),
              [&](const Tensor& dst) { matmul_into(call.inputs[0], call.inputs[1], dst); });
}

void linear(const OpCall& call, const Tensor& out) {
  if (out.numel() == 0) return;
  with_output(out, compute_dtype(natural_dtype(call)),
              [&](const Tensor& dst) { linear_into(call, dst); });
}

}  // namespace kiln::cpu
