// matmul (torch.matmul semantics) and linear (x @ weight^T + bias) on cuBLAS
// (ops/cuda/gemm.cuh).
//
// matmul: a 1-D a is a row [1, k], a 1-D b a column [k, 1] (the dim is dropped from the
// result, which the shape rule already did). The batch dims broadcast; each operand is
// viewed with 0 strides over the out batch. When an operand's batch offsets are one
// stride times the flat batch index (dense batches, or fully broadcast ones) it is passed
// as is to one strided-batched gemm; otherwise (or when its matrix strides do not fit
// cuBLAS) it is packed first. Operands are converted to out's dtype.
//
// linear: x's leading dims are flattened into rows (packed if they do not collapse to one
// stride); weight [out, in] is used transposed in place; the bias is broadcast into out
// first and the gemm accumulates onto it.
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm.cuh"

namespace kiln::cuda_impl {
namespace {

// The single stride s with offset(batch index b) == b * s over the batch sizes, if any.
bool batch_stride(const Dims& sizes, const Dims& strides, int64_t* out) {
  int64_t expected = -1, span = 1;  // span: elements per step of the current dim
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (expected < 0) {
      expected = strides[i];  // the innermost non-trivial dim fixes s
    } else if (strides[i] != expected * span) {
      return false;
    }
    span *= sizes[i];
  }
  *out = expected < 0 ? 0 : expected;
  return true;
}

struct Operand3 {
  Tensor t;  // viewed as [batch..., rows, cols]
  MatrixArg arg;
};

// Prepares a [batch..., rows, cols] view v for gemm: packs it when its batch or matrix
// strides do not fit.
Operand3 prepare(const Tensor& v, const Dims& batch_sizes) {
  const int64_t r = v.dim() - 2;
  Dims bstrides(v.strides().begin(), v.strides().begin() + r);
  int64_t bs = 0;
  const int64_t rows = v.size(r), cols = v.size(r + 1);
  if (batch_stride(batch_sizes, bstrides, &bs) &&
      gemm_fits(rows, cols, v.stride(r), v.stride(r + 1))) {
    return {v, MatrixArg{v.data_ptr(), v.stride(r), v.stride(r + 1), bs}};
  }
  Tensor p = packed(v);
  return {p, MatrixArg{p.data_ptr(), cols, 1, rows * cols}};
}

// v with batch dims broadcast to batch_sizes (0 strides), as a view of the same storage.
Tensor expand_batch(const Tensor& m, const Dims& batch_sizes) {
  const int64_t mb = m.dim() - 2;
  const int64_t nb = static_cast<int64_t>(batch_sizes.size());
  Dims sizes(batch_sizes.begin(), batch_sizes.end()), strides(static_cast<size_t>(nb), 0);
  for (int64_t i = 0; i < mb; ++i) {
    const int64_t d = nb - mb + i;
    strides[d] = m.size(i) == 1 ? 0 : m.stride(i);
  }
  sizes.push_back(m.size(-2));
  sizes.push_back(m.size(-1));
  strides.push_back(m.stride(-2));
  strides.push_back(m.stride(-1));
  return Tensor::make_view(m.storage(), sizes, strides, m.storage_offset(), m.dtype());
}

// A 1-D tensor as a [1, k] row (row = true) or a [k, 1] column.
Tensor as_matrix(const Tensor& t, bool row) {
  if (t.dim() != 1) return t;
  const int64_t k = t.size(0), s = t.stride(0);
  Dims sizes = row ? Dims{1, k} : Dims{k, 1};
  Dims strides = row ? Dims{k * s, s} : Dims{s, 1};
  return Tensor::make_view(t.storage(), sizes, strides, t.storage_offset(), t.dtype());
}

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void matmul(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  const char* op = call.name();
  const DType dtype = out.dtype();
  Tensor a = as_matrix(call.inputs[0], true), b = as_matrix(call.inputs[1], false);
  if (a.dtype() != dtype) a = packed(a, dtype);
  if (b.dtype() != dtype) b = packed(b, dtype);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  // Out batch: broadcast of the two batch shapes.
  Dims ab(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Dims batch_sizes = broadcast_shapes(ab, bb, op);
  const int64_t batch = dims_numel(batch_sizes);
  if (batch == 0 || m == 0 || n == 0) return;
  Operand3 pa = prepare(expand_batch(a, batch_sizes), batch_sizes);
  Operand3 pb = prepare(expand_batch(b, batch_sizes), batch_sizes);
  with_packed_out(out, op, [&](const Tensor& o) {
    gemm(dtype, o.device().index, GemmShape{batch, m, n, k}, pa.arg, pb.arg, o.data_ptr(), n, m * n,
         false, op);
  });
}

void linear(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  const char* op = call.name();
  const DType dtype = out.dtype();
  const Tensor& x0 = call.inputs[0];
  const Tensor w = call.inputs[1].dtype() == dtype ? call.inputs[1] : packed(call.inputs[1], dtype);
  const int64_t in_f = w.size(1), out_f = w.size(0);
  const int64_t rows = dims_numel(Dims(x0.sizes().begin(), x0.sizes().end() - 1));
  // x as [rows, in]: its leading dims must collapse to one stride, else pack.
  Tensor x = x0.dtype() == dtype ? x0 : packed(x0, dtype);
  int64_t row_stride = in_f;
  {
    Dims lead(x.sizes().begin(), x.sizes().end() - 1);
    Dims lead_strides(x.strides().begin(), x.strides().end() - 1);
    const int64_t col_stride = x.dim() >= 1 ? x.stride(-1) : 1;
    if (!batch_stride(lead, lead_strides, &row_stride) ||
        !gemm_fits(rows, in_f, row_stride, col_stride)) {
      x = packed(x);
      row_stride = in_f;
    }
  }
  const int64_t col_stride = x.dim() >= 1 && x.size(-1) > 1 ? x.stride(-1) : 1;
  MatrixArg xa{x.data_ptr(), row_stride, col_stride, 0};
  // weight^T as [in, out]: element (i, o) at o * w.stride(0) + i * w.stride(1).
  Tensor wt = w;
  if (!gemm_fits(in_f, out_f, w.stride(1), w.stride(0))) wt = packed(w);
  MatrixArg wa{wt.data_ptr(), wt.stride(1), wt.stride(0), 0};
  const bool has_bias = call.inputs.size() > 2 && call.inputs[2].defined();
  with_packed_out(out, op, [&](const Tensor& o) {
    if (has_bias) {
      const Tensor bias = packed(call.inputs[2], dtype);
      fill_bias(o, bias, out_f, 1, op);
    }
    gemm(dtype, o.device().index, GemmShape{1, rows, out_f, in_f}, xa, wa, o.data_ptr(), out_f, 0,
         has_bias, op);
  });
}

}  // namespace kiln::cuda
