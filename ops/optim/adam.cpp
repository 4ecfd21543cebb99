// Adam / AdamW as torch.optim.Adam / AdamW (single-tensor form):
//   AdamW: p *= 1 - lr * weight_decay;   Adam: g += weight_decay * p
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   (amsgrad: vmax = max(vmax, v), used in place of v)
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#include <cmath>

#include "ops/api.h"
#include "ops/autograd/grad_mode.h"
#include "ops/autograd/record.h"
#include "ops/optim/optimizer.h"
#include "runtime/error.h"

namespace kiln::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params)),
      options_(options),
      decoupled_(decoupled),
      steps_(params_.size(), 0),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      max_exp_avg_sq_(params_.size()) {
  const char* name = decoupled ? "[AdamW]" : "[Adam]";
  KILN_CHECK(options.lr >= 0, ValueError, name, " invalid learning rate ", options.lr);
  KILN_CHECK(options.eps >= 0, ValueError, name, " invalid epsilon ", options.eps);
  KILN_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
             ValueError, name, " betas must be in [0, 1), got (", options.beta1, ", ",
             options.beta2, ")");
  lr_ = options.lr;
}

void Adam::step() {
  autograd::NoGradScope no_grad;
  autograd::LibraryLoopScope one_update;  // one trace with the step, not a loop per param
  const AdamOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (o.maximize) g = -g;
    const int64_t t = ++steps_[i];
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros(p.sizes(), TensorOptions(p.dtype(), p.device()));
      exp_avg_sq_[i] = zeros(p.sizes(), TensorOptions(p.dtype(), p.device()));
      if (o.amsgrad) max_exp_avg_sq_[i] = zeros(p.sizes(), TensorOptions(p.dtype(), p.device()));
    }
    Tensor param = p;
    if (o.weight_decay != 0) {
      if (decoupled_)
        param = p * (1 - lr_ * o.weight_decay);
      else
        g = g + p * o.weight_decay;
    }
    const Tensor m = exp_avg_[i] * o.beta1 + g * (1 - o.beta1);
    Tensor v = exp_avg_sq_[i] * o.beta2 + g * g * (1 - o.beta2);
    exp_avg_[i].copy_(m);
    exp_avg_sq_[i].copy_(v);
    if (o.amsgrad) {
      max_exp_avg_sq_[i].copy_(maximum(max_exp_avg_sq_[i], v));
      v = max_exp_avg_sq_[i];
    }
    const double bias1 = 1 - std::pow(o.beta1, static_cast<double>(t));
    const double bias2_sqrt = std::sqrt(1 - std::pow(o.beta2, static_cast<double>(t)));
    const Tensor denom = sqrt(v) / bias2_sqrt + o.eps;
    p.copy_(param - m / denom * (lr_ / bias1));
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), options, true) {}

}  // namespace kiln::optim
