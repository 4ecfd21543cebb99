#include "ops/optim/optimizer.h"

#include <cmath>

#include "ops/api.h"
#include "ops/autograd/grad_mode.h"
#include "runtime/error.h"

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    KILN_CHECK(params_[i].defined(), ValueError, "[optimizer] parameter ", i, " is undefined");
    KILN_CHECK(params_[i].is_leaf(), ValueError, "[optimizer] parameter ", i,
               " is not a leaf tensor (it has history: ", params_[i].grad_fn_name(),
               "); optimize leaves, e.g. x.detach().set_requires_grad()");
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradScope no_grad;
  for (Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      p.grad().zero_();
  }
}

}  // namespace kiln::optim
