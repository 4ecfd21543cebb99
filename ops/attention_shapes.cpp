// The shape rule of the fused attention ops (ops/attention_layout.h): every message
// names the op, the argument and expected vs actual.
#include <algorithm>

#include "ops/attention_layout.h"
#include "runtime/error.h"

namespace kiln {
namespace {

using detail::cat;

Dims batch_of(const Tensor& t) { return Dims(t.sizes().begin(), t.sizes().end() - 2); }

Dims with_rows(const Dims& batch, int64_t rows, int64_t cols) {
  Dims d = batch;
  d.push_back(rows);
  d.push_back(cols);
  return d;
}

void check_tensor(const OpCall& c, const Tensor& t, const char* arg, const Dims& sizes,
                  DType dtype) {
  KILN_CHECK(t.sizes() == sizes, ShapeError, "[", c.name(), "] expected ", arg, " of shape ",
             dims_str(sizes), ", got ", dims_str(t.sizes()));
  KILN_CHECK(t.dtype() == dtype, DTypeError, "[", c.name(), "] expected ", arg, " of dtype ",
             dtype_name(dtype), " (the query's), got ", dtype_name(t.dtype()));
}

}  // namespace

AttentionShape attention_shape(const OpCall& c) {
  const size_t qi = attention_q_index(c.op);
  const Tensor &q = c.inputs[qi], &k = c.inputs[qi + 1], &v = c.inputs[qi + 2];
  AttentionShape s;
  s.batch = batch_of(q);
  s.batch_count = dims_numel(s.batch);
  s.L = q.size(-2);
  s.E = q.size(-1);
  s.S = k.size(-2);
  s.Ev = v.size(-1);
  s.has_mask = c.inputs.size() > qi + 3;
  return s;
}

OutputMeta infer_attention(const OpCall& c) {
  const size_t qi = attention_q_index(c.op);
  KILN_CHECK(c.inputs.size() == qi + 3 || c.inputs.size() == qi + 4, ValueError, "[", c.name(),
             "] expected ", qi + 3, " or ", qi + 4, " tensor arguments, got ", c.inputs.size());
  KILN_CHECK(c.scalars.size() == 1 || c.scalars.size() == 4, ValueError, "[", c.name(),
             "] expected 1 scalar argument (scale) or 4 (scale, dropout_p, seed, offset), got ",
             c.scalars.size());
  if (c.scalars.size() == 4) {
    const double p = c.scalars[1].to_double();
    KILN_CHECK(p >= 0.0 && p < 1.0, ValueError, "[", c.name(),
               "] expected dropout_p in [0, 1), got ", p);
    KILN_CHECK(c.inputs[qi].device().is_cuda(), DeviceError, "[", c.name(),
               "] dropout inside the fused kernel runs on CUDA only (got ",
               c.inputs[qi].device().str(),
               " inputs); scaled_dot_product_attention takes the "
               "composite elsewhere");
  }
  const Tensor &q = c.inputs[qi], &k = c.inputs[qi + 1], &v = c.inputs[qi + 2];
  const char* names[] = {"query", "key", "value"};
  const Tensor* qkv[] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    KILN_CHECK(qkv[i]->dim() >= 2, ShapeError, "[", c.name(), "] expected ", names[i],
               " with at least 2 dims (..., length, features), got shape ",
               dims_str(qkv[i]->sizes()));
    KILN_CHECK(is_floating(qkv[i]->dtype()), DTypeError, "[", c.name(), "] expected ", names[i],
               " to have a floating dtype (float16, bfloat16, float32, float64), got ",
               dtype_name(qkv[i]->dtype()));
  }
  const DType dtype = q.dtype();
  const Dims batch = batch_of(q);
  const int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  KILN_CHECK(E >= 1 && Ev >= 1, ShapeError, "[", c.name(),
             "] expected query and value with at least 1 feature, got query of shape ",
             dims_str(q.sizes()), " and value of shape ", dims_str(v.sizes()));
  check_tensor(c, k, "key", with_rows(batch, S, E), dtype);
  check_tensor(c, v, "value", with_rows(batch, S, v.size(-1)), dtype);
  if (c.inputs.size() == qi + 4) {
    const Tensor& mask = c.inputs[qi + 3];
    check_tensor(c, mask, "attn_mask", with_rows(batch, L, S),
                 mask.dtype() == DType::Bool ? DType::Bool : dtype);
  }
  const int64_t packed_rows = attention_packed_rows(c, L, S, Ev, dtype);
  if (c.op != OpId::Attention) {
    check_tensor(c, c.inputs[qi - 1], "packed (the attention op's result)",
                 with_rows(batch, packed_rows, Ev), dtype);
  }
  if (c.op == OpId::AttentionBackward)
    check_tensor(c, c.inputs[0], "grad", with_rows(batch, L, Ev), dtype);
  OutputMeta m;
  m.sizes = c.op == OpId::Attention                ? with_rows(batch, packed_rows, Ev)
            : c.op == OpId::AttentionOutput        ? with_rows(batch, L, Ev)
            : attention_grads_interleaved(q, k, v) ? Dims{q.size(0), L, 3, q.size(1), E}
                                                   : with_rows(batch, L + 2 * S, std::max(E, Ev));
  m.strides = contiguous_strides(m.sizes);
  m.dtype = dtype;
  m.device = q.device();
  return m;
}

}  // namespace kiln
