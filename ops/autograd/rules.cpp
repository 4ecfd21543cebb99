#include "ops/autograd/rules.h"

#include "ops/api.h"

namespace kiln::autograd {
namespace {

constexpr BackwardRule kNone{};
constexpr BackwardRule kPointwise{pointwise_backward, pointwise_saved};
constexpr BackwardRule kReduce{reduce_backward, reduce_saved};
constexpr BackwardRule kLinalg{linalg_backward, linalg_saved};
constexpr BackwardRule kData{data_backward, data_saved};
constexpr BackwardRule kAlongDim{along_dim_backward, along_dim_saved};
constexpr BackwardRule kAttention{attention_backward, attention_saved};
constexpr BackwardRule kLstm{lstm_backward, lstm_saved};

const BackwardRule& family_rule(OpId op) {
  switch (op_info(op).family) {
    case OpFamily::Unary:
    case OpFamily::Clamp:
    case OpFamily::Binary:
    case OpFamily::Where:
      return kPointwise;
    case OpFamily::Reduce:
    case OpFamily::Softmax:
    case OpFamily::LayerNorm:
      return kReduce;
    case OpFamily::Attention:
      return kAttention;
    case OpFamily::Recurrent:
      return kLstm;
    case OpFamily::Matmul:
    case OpFamily::Linear:
    case OpFamily::Conv2d:
    case OpFamily::Pool2d:
    case OpFamily::Unfold:
      return kLinalg;
    case OpFamily::Cat:
    case OpFamily::IndexSelect:
    case OpFamily::ToDevice:
    case OpFamily::View:
      return kData;
    case OpFamily::Gather:
    case OpFamily::Scatter:
    case OpFamily::Scan:
      return kAlongDim;
    case OpFamily::Sort:  // indices
    case OpFamily::Sample:
    case OpFamily::Nonzero:
    case OpFamily::Factory:
    case OpFamily::Random:
    case OpFamily::Collective:  // as torch.distributed.all_reduce: not differentiable
      return kNone;
  }
  return kNone;
}

}  // namespace

const BackwardRule& backward_rule(OpId op) {
  switch (op) {
    // Results that are piecewise constant or integral: no gradient flows.
    case OpId::Eq:
    case OpId::Ne:
    case OpId::Lt:
    case OpId::Le:
    case OpId::Gt:
    case OpId::Ge:
    case OpId::Argmax:
    // The fused attention's packed forward and its backward: attention_output carries
    // the gradient (rules_attention.cpp).
    case OpId::Attention:
    case OpId::AttentionBackward:
    // The fused LSTM's packed forward and its backward: lstm_output carries the gradient
    // (rules_lstm.cpp).
    case OpId::LstmLayer:
    case OpId::LstmBackward:
    // Max pooling's gradient (rules_linalg.cpp): no higher-order gradients.
    case OpId::MaxPool2dBackward:
      return kNone;
    default:
      return family_rule(op);
  }
}

Tensor sum_to(const Tensor& grad, const Dims& sizes) {
  if (grad.sizes() == sizes) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(sizes.size());
  Dims dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (sizes[d - lead] == 1 && grad.size(d) != 1)) dims.push_back(d);
  }
  Tensor out = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  if (lead > 0 || out.sizes() != sizes) out = out.reshape(sizes);
  return out;
}

Tensor expand_reduced(const Tensor& grad, const Dims& input_sizes, const Dims& dims, bool keepdim) {
  Tensor g = grad;
  if (!keepdim) {
    Dims kept = input_sizes;
    for (int64_t d : dims) kept[d] = 1;
    g = g.reshape(kept);
  }
  return g.expand(input_sizes);
}

}  // namespace kiln::autograd
