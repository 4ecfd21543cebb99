"""Adam and AdamW (amsgrad, maximize, weight decay: L2 for Adam, decoupled for AdamW),
torch.optim.Adam's rule. Without amsgrad a group runs on the C++ core
(ops/optim/adam.cpp) until a hyperparameter other than lr changes (OneCycleLR's betas)
or state is loaded; amsgrad groups, and groups after such a change, run the same rule
in Python (optimizer.py says why)."""

import math

from .. import _kiln as _C
from .optimizer import Optimizer, grad_of, next_step

_CONFIG = ("betas", "eps", "weight_decay", "amsgrad", "maximize")


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None):
        name = type(self).__name__
        if not 0.0 <= eps:
            raise _C.KilnValueError(f"{name}: Invalid epsilon value: {eps}")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise _C.KilnValueError(f"{name}: Invalid beta parameter at index {i}: {b}")
        if not 0.0 <= weight_decay:
            raise _C.KilnValueError(f"{name}: Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused))

    def _core_config(self, g):
        return tuple(tuple(g[k]) if k == "betas" else g[k] for k in _CONFIG)

    def _make_core(self, g):
        if g["amsgrad"]:
            return None  # the core's max_exp_avg_sq cannot be read back for state_dict
        b1, b2 = g["betas"]
        core = _C._Adam(g["params"], float(g["lr"]), float(b1), float(b2), float(g["eps"]),
                        float(g["weight_decay"]), bool(g["amsgrad"]), bool(g["maximize"]),
                        self._decoupled)
        core._config = self._core_config(g)
        return core

    def _export_core(self, group, core):
        for i, (p, m, v) in enumerate(zip(group["params"], core.exp_avg(), core.exp_avg_sq())):
            if m is None:
                continue
            steps = core.steps(i)
            self._counts[id(p)] = float(steps)
            self.state[p].update(step=_C.full((), float(steps), _C.float32), exp_avg=m,
                                 exp_avg_sq=v)

    def _step_group(self, g):
        beta1, beta2 = g["betas"]
        lr, wd, eps = g["lr"], g["weight_decay"], g["eps"]
        for p in g["params"]:
            if p.grad is None:
                continue
            grad = grad_of(p, g["maximize"])
            state = self.state[p]
            if "exp_avg" not in state:
                state["exp_avg"] = _C.zeros(tuple(p.shape), dtype=p.dtype, device=p.device)
                state["exp_avg_sq"] = _C.zeros(tuple(p.shape), dtype=p.dtype, device=p.device)
                if g["amsgrad"]:
                    state["max_exp_avg_sq"] = _C.zeros(tuple(p.shape), dtype=p.dtype,
                                                       device=p.device)
            step = next_step(self, p, state)
            if wd:
                if self._decoupled:
                    p.copy_(p * (1 - lr * wd))
                else:
                    grad = grad + wd * p
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.copy_(m + (grad - m) * (1 - beta1))  # lerp, as PyTorch
            v.copy_(v * beta2 + (1 - beta2) * grad * grad)
            step_size = lr / (1 - beta1 ** step)
            bc2_sqrt = math.sqrt(1 - beta2 ** step)
            if g["amsgrad"]:
                vmax = state["max_exp_avg_sq"]
                vmax.copy_(_C.maximum(vmax, v))
                v = vmax
            denom = _C.sqrt(v) / bc2_sqrt + eps
            p.copy_(p - step_size * m / denom)


class AdamW(Adam):
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused)
