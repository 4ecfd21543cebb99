// SGD as torch.optim.SGD: g = grad (+ weight_decay * p); with momentum,
// buf = g on the first step, then momentum * buf + (1 - dampening) * g; g = buf, or
// g + momentum * buf with Nesterov; p -= lr * g (+= when maximizing).
#include "ops/api.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/record.h"
#include "ops/optim/optimizer.h"
#include "runtime/error.h"

namespace kiln::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params)), options_(options), momentum_(params_.size()) {
  KILN_CHECK(options.lr >= 0, ValueError, "[SGD] invalid learning rate ", options.lr);
  KILN_CHECK(options.momentum >= 0, ValueError, "[SGD] invalid momentum ", options.momentum);
  KILN_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0), ValueError,
             "[SGD] Nesterov momentum requires a momentum and zero dampening");
  lr_ = options.lr;
}

void SGD::step() {
  autograd::NoGradScope no_grad;
  autograd::LibraryLoopScope one_update;  // one trace with the step, not a loop per param
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (o.maximize) g = -g;
    if (o.weight_decay != 0) g = g + p * o.weight_decay;
    if (o.momentum != 0) {
      Tensor& buf = momentum_[i];
      if (!buf.defined()) {
        buf = g.clone();
      } else {
        buf.copy_(buf * o.momentum + g * (1 - o.dampening));
      }
      g = o.nesterov ? g + buf * o.momentum : buf;
    }
    p.copy_(p - g * lr_);
  }
}

}  // namespace kiln::optim
