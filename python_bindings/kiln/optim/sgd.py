"""SGD (momentum, dampening, Nesterov, weight decay, maximize), torch.optim.SGD's rule.
A group runs on the C++ core (ops/optim/sgd.cpp) until a hyperparameter other than lr
changes or state is loaded; then on the same rule in Python (optimizer.py says why)."""

from .. import _kiln as _C
from .optimizer import Optimizer, grad_of

_CONFIG = ("momentum", "dampening", "weight_decay", "nesterov", "maximize")


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False):
        if momentum < 0.0:
            raise _C.KilnValueError(f"SGD: Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise _C.KilnValueError(f"SGD: Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise _C.KilnValueError("SGD: Nesterov momentum requires a momentum and zero "
                                    "dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable))

    def _core_config(self, g):
        return tuple(g[k] for k in _CONFIG)

    def _make_core(self, g):
        core = _C._SGD(g["params"], float(g["lr"]), float(g["momentum"]), float(g["dampening"]),
                       float(g["weight_decay"]), bool(g["nesterov"]), bool(g["maximize"]))
        core._config = self._core_config(g)
        return core

    def _export_core(self, group, core):
        for p, buf in zip(group["params"], core.momentum_buffers()):
            if buf is not None:
                self.state[p]["momentum_buffer"] = buf

    def _step_group(self, g):
        momentum, dampening = g["momentum"], g["dampening"]
        for p in g["params"]:
            if p.grad is None:
                continue
            d_p = grad_of(p, g["maximize"])
            if g["weight_decay"]:
                d_p = d_p + g["weight_decay"] * p
            if momentum:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = d_p.detach().clone()
                else:
                    buf.copy_(buf * momentum + (1 - dampening) * d_p)
                d_p = d_p + momentum * buf if g["nesterov"] else buf
            p.copy_(p - g["lr"] * d_p)
