"""Adadelta (rho, eps, weight_decay, maximize), the rule of torch.optim.Adadelta;
state: step, square_avg, acc_delta."""

from .. import _kiln as _C
from .optimizer import Optimizer, grad_of, next_step


class Adadelta(Optimizer):
    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, foreach=None, *,
                 maximize=False, differentiable=False):
        if not 0.0 <= rho <= 1.0:
            raise _C.KilnValueError(f"Adadelta: Invalid rho value: {rho}")
        if eps < 0.0:
            raise _C.KilnValueError(f"Adadelta: Invalid epsilon value: {eps}")
        if weight_decay < 0.0:
            raise _C.KilnValueError(f"Adadelta: Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable))

    def _step_group(self, g):
        rho, eps = g["rho"], g["eps"]
        for p in g["params"]:
            if p.grad is None:
                continue
            grad = grad_of(p, g["maximize"])
            state = self.state[p]
            if "square_avg" not in state:
                state["square_avg"] = _C.zeros(tuple(p.shape), dtype=p.dtype, device=p.device)
                state["acc_delta"] = _C.zeros(tuple(p.shape), dtype=p.dtype, device=p.device)
            next_step(self, p, state)
            if g["weight_decay"]:
                grad = grad + g["weight_decay"] * p
            sq, acc = state["square_avg"], state["acc_delta"]
            sq.copy_(sq * rho + (1 - rho) * grad * grad)
            delta = _C.sqrt(acc + eps) / _C.sqrt(sq + eps) * grad
            acc.copy_(acc * rho + (1 - rho) * delta * delta)
            p.copy_(p - g["lr"] * delta)
