// Optimizers: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW, with
// PyTorch's update rules step for step. step() runs under no_grad and writes each
// parameter (and its state) in place with copy_ from one pointwise expression, so a
// traced training step replays the update as part of its plan: per parameter the math
// fuses into one kernel, and learning rate, step count and bias corrections are
// run-time scalars (changing them never recompiles). Parameters without a gradient
// are skipped.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace kiln::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Clears the gradients (undefined, or zeros in place when set_to_none is false).
  void zero_grad(bool set_to_none = true);
  const std::vector<Tensor>& params() const { return params_; }
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }

 protected:
  std::vector<Tensor> params_;
  double lr_ = 1e-3;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  const std::vector<Tensor>& momentum_buffers() const { return momentum_; }

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;  // undefined until a parameter's first step
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled
  bool amsgrad = false;
  bool maximize = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  void step() override;
  int64_t steps(size_t param) const { return steps_[param]; }
  const std::vector<Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<Tensor>& exp_avg_sq() const { return exp_avg_sq_; }

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled);

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<int64_t> steps_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter), PyTorch's default 1e-2.
class AdamW final : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options);
  static AdamOptions defaults() {
    AdamOptions o;
    o.weight_decay = 1e-2;
    return o;
  }
};

}  // namespace kiln::optim
