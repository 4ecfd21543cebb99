#include "ops/losses.h"

#include <cmath>

#include "ops/api.h"
#include "runtime/error.h"

namespace kiln {
namespace {

Tensor reduce_loss(const Tensor& loss, const std::string& reduction, const char* op) {
  if (reduction == "mean") return mean(loss);
  if (reduction == "sum") return sum(loss);
  KILN_CHECK(reduction == "none", ValueError, "[", op,
             "] reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  return loss;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  KILN_CHECK(input.defined() && target.defined(), ValueError, "[mse_loss] undefined argument");
  const Tensor d = input - target;
  return reduce_loss(d * d, reduction, "mse_loss");
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const std::string& reduction,
                     int64_t ignore_index) {
  KILN_CHECK(logits.defined() && target.defined(), ValueError,
             "[cross_entropy] undefined argument");
  KILN_CHECK(is_floating(logits.dtype()), DTypeError,
             "[cross_entropy] expected floating point logits, got ", dtype_name(logits.dtype()));
  KILN_CHECK(target.dtype() == DType::Int64 || target.dtype() == DType::Int32, DTypeError,
             "[cross_entropy] expected integer class indices as target, got ",
             dtype_name(target.dtype()));
  const Tensor x = logits.dim() == 1 ? logits.unsqueeze(0) : logits;
  const Tensor t = target.reshape({-1});
  KILN_CHECK(x.dim() == 2 && t.size(0) == x.size(0), ShapeError,
             "[cross_entropy] expected logits [N, C] and target [N], got ",
             dims_str(logits.sizes()), " and ", dims_str(target.sizes()));
  const Tensor classes = arange(x.size(1), TensorOptions(t.dtype(), x.device()));
  const Tensor hit = t.unsqueeze(1) == classes.unsqueeze(0);  // [N, C] one-hot
  const Tensor picked = sum(where(hit, log_softmax(x, 1), Scalar(0.0)), {1});
  const Tensor valid = (t != ignore_index).to(x.dtype());
  const Tensor loss = -(picked * valid);
  if (reduction == "mean") {
    // The mean over the targets not ignored; all ignored: nan, as PyTorch, with a zero
    // gradient (not 0 * inf: PyTorch's backward never writes the ignored rows).
    const Tensor count = sum(valid);
    const Tensor none = count == Scalar(0.0);
    const Tensor inverse = where(none, Scalar(0.0), reciprocal(where(none, Scalar(1.0), count)));
    return sum(loss) * inverse + where(none, Scalar(std::nan("")), count * 0.0);
  }
  return reduce_loss(logits.dim() == 1 ? loss.reshape({}) : loss, reduction, "cross_entropy");
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::string& reduction) {
  KILN_CHECK(input.defined() && target.defined(), ValueError,
             "[binary_cross_entropy_with_logits] undefined argument");
  KILN_CHECK(input.sizes() == target.sizes(), ShapeError,
             "[binary_cross_entropy_with_logits] target shape ", dims_str(target.sizes()),
             " must equal input shape ", dims_str(input.sizes()));
  // maximum(x, 0), not relu(x): at x == 0 its gradient is 1/2 (kiln's tie rule), so the
  // input gradient there is sigmoid(0) - y like PyTorch's, where relu's 0 would give -y.
  const Tensor loss = maximum(input, Scalar(0.0)) - input * target + log(1 + exp(-abs(input)));
  return reduce_loss(loss, reduction, "binary_cross_entropy_with_logits");
}

}  // namespace kiln
