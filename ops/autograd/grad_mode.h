// Grad mode: whether ops record their history for reverse mode (per thread, on by
// default). Backward passes, optimizer updates and kiln.no_grad() run with it off.
#pragma once

namespace kiln::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Sets grad mode for a scope and restores the previous mode at its end.
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) : saved_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeScope() { set_grad_enabled(saved_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool saved_;
};

// No history is recorded while one is alive (PyTorch's torch.no_grad()).
class NoGradScope : public GradModeScope {
 public:
  NoGradScope() : GradModeScope(false) {}
};

}  // namespace kiln::autograd
