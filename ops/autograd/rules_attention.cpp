// The backward rule of attention_output (ops/attention_layout.h). One fused
// attention_backward call from q, k, v, the mask and the packed forward result (output
// and logsumexp), sliced into dq, dk and dv: on the CPU always, on CUDA where
// attention_cuda_backward_supports says so (float32). Otherwise the unfused gradient (P
// recomputed by matmul and softmax, Z the dropout mask redrawn from the forward's state
// (1 without dropout), then dV = (P Z)^T g, dS = P (Z g V^T - rowsum(P Z g V^T)) scale,
// dQ = dS K, dK = dS^T Q). attention and attention_backward have no rule of their own. A
// floating attn_mask gets no gradient. Interleaved grads (ops/attention_layout.h) give dq,
// dk and dv as strided views, the strides of q, k and v split from one projection.
#include <cmath>

#include "ops/api.h"
#include "ops/attention_layout.h"
#include "ops/autograd/rules.h"
#include "ops/dispatch.h"

namespace kiln::autograd {
namespace {

TensorList unfused_backward(const OpCall& c, const AttentionShape& s, const Tensor& grad) {
  const Tensor &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3];
  const double scale = c.scalars[0].to_double();
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), Scalar(scale));
  if (c.attrs.causal) {
    const Tensor rows = arange(s.L, {DType::Int64, q.device()}).unsqueeze(1);
    const Tensor cols = arange(s.S, {DType::Int64, q.device()}).unsqueeze(0);
    scores = where(le(cols, rows), scores, Scalar(-INFINITY));
  }
  if (s.has_mask) {
    const Tensor& mask = c.inputs[4];
    scores = mask.dtype() == DType::Bool ? where(mask, scores, Scalar(-INFINITY)) : scores + mask;
  }
  const Tensor p = softmax(scores, -1);
  Tensor dp = matmul(grad, v.transpose(-2, -1));
  Tensor pz = p;
  if (c.scalars.size() == 4) {  // the forward's dropout mask, redrawn
    const double drop = c.scalars[1].to_double();
    const RandomState st{static_cast<uint64_t>(c.scalars[2].to_int()),
                         static_cast<uint64_t>(c.scalars[3].to_int())};
    const Tensor keep = ge(rand(p.sizes(), {p.dtype(), p.device()}, st), Scalar(drop));
    const Tensor z = mul(keep.to(p.dtype()), Scalar(1.0 / (1.0 - drop)));
    pz = p * z;
    dp = dp * z;
  }
  const Tensor ds = mul(p * (dp - sum(p * dp, {q.dim() - 1}, true)), Scalar(scale));
  TensorList out(c.inputs.size());
  out[1] = matmul(ds, k);
  out[2] = matmul(ds.transpose(-2, -1), q);
  out[3] = matmul(pz.transpose(-2, -1), grad);
  return out;
}

}  // namespace

uint32_t attention_saved(const OpCall&, uint32_t) { return kAll; }

TensorList attention_backward(const OpNode& node, const Tensor& grad) {
  const OpCall& c = node.call();
  OpCall call{OpId::AttentionBackward, {grad}, c.scalars, c.attrs};
  for (size_t i = 0; i < c.inputs.size(); ++i) call.inputs.push_back(node.saved(i));
  const AttentionShape s = attention_shape(call);
  const Tensor mask = s.has_mask ? call.inputs[5] : Tensor();
  if (grad.device().is_cuda() &&
      attention_cuda_backward_supports(call.inputs[2], call.inputs[3], call.inputs[4], mask)) {
    if (grad.stride(-1) != 1) call.inputs[0] = grad.contiguous();
  } else if (grad.device().is_cuda()) {
    OpCall saved = c;
    for (size_t i = 0; i < c.inputs.size(); ++i) saved.inputs[i] = node.saved(i);
    return unfused_backward(saved, s, grad);
  }
  const Tensor grads = dispatch(call);
  TensorList out(c.inputs.size());
  if (attention_grads_interleaved(call.inputs[2], call.inputs[3], call.inputs[4])) {
    // [B, L, 3, H, E]: views [B, H, L, E]
    for (int64_t i = 0; i < 3; ++i) out[1 + i] = grads.select(2, i).transpose(1, 2);
    return out;
  }
  out[1] = grads.slice(-2, 0, s.L).slice(-1, 0, s.E);
  out[2] = grads.slice(-2, s.L, s.L + s.S).slice(-1, 0, s.E);
  out[3] = grads.slice(-2, s.L + s.S, s.L + 2 * s.S).slice(-1, 0, s.Ev);
  return out;
}

}  // namespace kiln::autograd
