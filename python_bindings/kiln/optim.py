"""kiln.optim: SGD, Adam and AdamW with torch.optim's interface (param_groups with
their own hyperparameters, zero_grad, step). The update math is C++
(ops/optim): each parameter's update is one pointwise expression written back in
place, so a traced training step replays it inside its plan, fused."""

from . import _kiln as _C
from ._kiln import Tensor


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        params = list(params)
        if not params:
            raise _C.KilnValueError("[optimizer] got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        self.param_groups = []
        self._cores = []
        for group in params:
            self.add_param_group(group)

    def add_param_group(self, group):
        group = dict(group)
        ps = group["params"]
        group["params"] = [ps] if isinstance(ps, Tensor) else list(ps)
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"[optimizer] parameters must be kiln.Tensors, got "
                                f"{type(p).__name__}")
        self.param_groups.append(group)
        self._cores.append(self._make_core(group))

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    with _no_grad():
                        p.grad.zero_()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ._functions import enable_grad

            with enable_grad():
                loss = closure()
        for group, core in zip(self.param_groups, self._cores):
            core.set_lr(float(group["lr"]))  # schedulers change group["lr"]
            core.step()
        return loss

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        return "\n".join(lines) + "\n)"


def _no_grad():
    from ._functions import no_grad

    return no_grad()


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def _make_core(self, g):
        return _C._SGD(g["params"], float(g["lr"]), float(g["momentum"]), float(g["dampening"]),
                       float(g["weight_decay"]), bool(g["nesterov"]), bool(g["maximize"]))


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def _make_core(self, g):
        b1, b2 = g["betas"]
        return _C._Adam(g["params"], float(g["lr"]), float(b1), float(b2), float(g["eps"]),
                        float(g["weight_decay"]), bool(g["amsgrad"]), bool(g["maximize"]),
                        self._decoupled)


class AdamW(Adam):
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
