// Loss functions for training, written with primitive ops (so autograd and the tracer
// see ordinary ops: cross_entropy's log_softmax and pick fuse into one row kernel when
// traced). reduction: "mean" (default), "sum" or "none".
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace kiln {

// mean((input - target)^2); shapes broadcast.
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
// -log_softmax(logits)[i, target[i]] for logits [N, C] (or [C]) and integer class
// indices target [N] (or []); targets equal to ignore_index add nothing and do not count.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const std::string& reduction = "mean", int64_t ignore_index = -100);
// max(x, 0) - x * y + log(1 + exp(-|x|)), the stable form of BCE(sigmoid(x), y).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::string& reduction = "mean");

}  // namespace kiln
