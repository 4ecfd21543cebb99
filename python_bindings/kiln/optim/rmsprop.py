"""RMSprop (alpha, eps, weight_decay, momentum, centered, maximize), the rule of
torch.optim.RMSprop; state: step, square_avg[, momentum_buffer][, grad_avg]."""

from .. import _kiln as _C
from .optimizer import Optimizer, grad_of, next_step


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, foreach=None, maximize=False, differentiable=False):
        for name, v in (("epsilon", eps), ("momentum", momentum),
                        ("weight_decay", weight_decay), ("alpha", alpha)):
            if v < 0.0:
                raise _C.KilnValueError(f"RMSprop: Invalid {name} value: {v}")
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable))

    def _step_group(self, g):
        alpha, eps, momentum = g["alpha"], g["eps"], g["momentum"]
        for p in g["params"]:
            if p.grad is None:
                continue
            grad = grad_of(p, g["maximize"])
            state = self.state[p]
            if "square_avg" not in state:
                zeros = (tuple(p.shape),)
                state["square_avg"] = _C.zeros(*zeros, dtype=p.dtype, device=p.device)
                if momentum > 0:
                    state["momentum_buffer"] = _C.zeros(*zeros, dtype=p.dtype, device=p.device)
                if g["centered"]:
                    state["grad_avg"] = _C.zeros(*zeros, dtype=p.dtype, device=p.device)
            next_step(self, p, state)
            if g["weight_decay"]:
                grad = grad + g["weight_decay"] * p
            sq = state["square_avg"]
            sq.copy_(sq * alpha + (1 - alpha) * grad * grad)
            if g["centered"]:
                ga = state["grad_avg"]
                ga.copy_(ga + (grad - ga) * (1 - alpha))
                avg = _C.sqrt(sq - ga * ga) + eps
            else:
                avg = _C.sqrt(sq) + eps
            if momentum > 0:
                buf = state["momentum_buffer"]
                buf.copy_(buf * momentum + grad / avg)
                p.copy_(p - g["lr"] * buf)
            else:
                p.copy_(p - g["lr"] * grad / avg)
