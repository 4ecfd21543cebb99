// scaled_dot_product_attention (ops/api.h): broadcasts the batch dims, normalizes the
// mask, then picks the fused ops (ops/attention_layout.h) or, where no fused kernel
// exists for the inputs on their device, the composite
// dropout(softmax(q k^T * scale + mask)) v.
#include <cmath>

#include "ops/api.h"
#include "ops/attention_layout.h"
#include "ops/dispatch.h"
#include "runtime/error.h"

namespace kiln {
namespace {

Dims leading(const Tensor& t, int64_t trailing) {
  return Dims(t.sizes().begin(), t.sizes().end() - trailing);
}

Dims with_last(Dims batch, int64_t a, int64_t b) {
  batch.push_back(a);
  batch.push_back(b);
  return batch;
}

}  // namespace

Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           bool is_causal, double scale, double dropout_p) {
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), Scalar(scale));
  const int64_t L = q.size(-2), S = k.size(-2);
  if (is_causal) {
    const Tensor rows = arange(L, {DType::Int64, q.device()}).unsqueeze(1);
    const Tensor cols = arange(S, {DType::Int64, q.device()}).unsqueeze(0);
    scores = where(le(cols, rows), scores, Scalar(-INFINITY));
  }
  if (mask.defined())
    scores = mask.dtype() == DType::Bool ? where(mask, scores, Scalar(-INFINITY)) : scores + mask;
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0) {  // kiln.nn.functional.dropout's form
    const Tensor keep =
        ge(rand(weights.sizes(), {weights.dtype(), weights.device()}), Scalar(dropout_p));
    weights = where(keep, mul(weights, Scalar(1.0 / (1.0 - dropout_p))), Scalar(0.0));
  }
  return matmul(weights, v);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale, double dropout_p) {
  const char* names[] = {"query", "key", "value"};
  const Tensor* qkv[] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    KILN_CHECK(qkv[i]->defined(), ValueError, "[scaled_dot_product_attention] ", names[i],
               " is undefined");
    KILN_CHECK(qkv[i]->dim() >= 2, ShapeError, "[scaled_dot_product_attention] expected ", names[i],
               " with at least 2 dims (..., length, features), got shape ",
               dims_str(qkv[i]->sizes()));
  }
  KILN_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, ValueError,
             "[scaled_dot_product_attention] expected dropout_p in [0, 1], got ", dropout_p);
  const int64_t L = q.size(-2), S = k.size(-2);
  Dims batch = broadcast_shapes(leading(q, 2), leading(k, 2), "scaled_dot_product_attention");
  batch = broadcast_shapes(batch, leading(v, 2), "scaled_dot_product_attention");
  Tensor mask = attn_mask;
  if (mask.defined()) {
    KILN_CHECK(mask.dtype() == DType::Bool || is_floating(mask.dtype()), DTypeError,
               "[scaled_dot_product_attention] expected attn_mask of dtype bool or floating, got ",
               dtype_name(mask.dtype()));
    KILN_CHECK(mask.dim() >= 1, ShapeError,
               "[scaled_dot_product_attention] expected attn_mask broadcastable to ",
               dims_str(with_last(batch, L, S)), ", got a 0-dim mask");
    const Dims full = broadcast_shapes(mask.sizes(), with_last(batch, L, S),
                                       "scaled_dot_product_attention (attn_mask)");
    KILN_CHECK(full == with_last(batch, L, S), ShapeError,
               "[scaled_dot_product_attention] expected attn_mask broadcastable to ",
               dims_str(with_last(batch, L, S)), ", got shape ", dims_str(mask.sizes()));
    if (mask.dtype() != DType::Bool && mask.dtype() != q.dtype()) mask = mask.to(q.dtype());
  }
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  OpCall call{OpId::Attention,
              {q.expand(with_last(batch, L, q.size(-1))), k.expand(with_last(batch, S, k.size(-1))),
               v.expand(with_last(batch, v.size(-2), v.size(-1)))},
              {Scalar(s)},
              {}};
  call.attrs.causal = is_causal;
  if (mask.defined()) call.inputs.push_back(mask.expand(with_last(batch, L, S)));
  const bool fused =
      dropout_p > 0
          ? dropout_p < 1 &&
                attention_cuda_supports(call.inputs[0], call.inputs[1], call.inputs[2], mask)
          : q.device().is_cpu() ||
                attention_cuda_supports(call.inputs[0], call.inputs[1], call.inputs[2], mask);
  if (!fused) return attention_composite(q, k, v, mask, is_causal, s, dropout_p);
  if (dropout_p > 0) {  // the mask's state: what the composite's rand would draw
    const RandomState st = next_random_state();
    call.scalars.push_back(Scalar(dropout_p));
    call.scalars.push_back(Scalar(static_cast<int64_t>(st.seed)));
    call.scalars.push_back(Scalar(static_cast<int64_t>(st.offset)));
  }
  // The packed result carries no history (attention has no backward rule):
  // attention_output is the differentiable step, whose node saves packed as an input.
  const Tensor packed = dispatch(call);
  call.op = OpId::AttentionOutput;
  call.inputs.insert(call.inputs.begin(), packed);
  return dispatch(call);
}

}  // namespace kiln
