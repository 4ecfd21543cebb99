"""Adagrad (lr_decay, weight_decay, initial_accumulator_value, eps, maximize), the
rule of torch.optim.Adagrad; state: step, sum."""

from .. import _kiln as _C
from .optimizer import Optimizer, grad_of, next_step


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False):
        for name, v in (("lr_decay", lr_decay), ("weight_decay", weight_decay),
                        ("initial_accumulator_value", initial_accumulator_value),
                        ("epsilon", eps)):
            if v < 0.0:
                raise _C.KilnValueError(f"Adagrad: Invalid {name} value: {v}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable))
        for group in self.param_groups:  # PyTorch creates the state up front
            for p in group["params"]:
                state = self.state[p]
                state["step"] = _C.full((), 0.0, _C.float32)
                state["sum"] = _C.full(tuple(p.shape), float(group["initial_accumulator_value"]),
                                       p.dtype, p.device)

    def _step_group(self, g):
        for p in g["params"]:
            if p.grad is None:
                continue
            grad = grad_of(p, g["maximize"])
            state = self.state[p]
            step = next_step(self, p, state)
            if g["weight_decay"]:
                grad = grad + g["weight_decay"] * p
            clr = g["lr"] / (1 + (step - 1) * g["lr_decay"])
            total = state["sum"]
            total.copy_(total + grad * grad)
            p.copy_(p - clr * grad / (_C.sqrt(total) + g["eps"]))
