"""Optimizer: torch.optim.Optimizer's interface (param_groups with their own
hyperparameters, state, zero_grad, step(closure), add_param_group, state_dict /
load_state_dict in PyTorch's layout, so checkpoints move between kiln and torch).

Two engines run a parameter group's update:
- a C++ core (SGD, Adam, AdamW: ops/optim), each parameter's update one fused pointwise
  expression, used while the group's hyperparameters (other than lr) keep the values
  it was built with and no state was loaded;
- the optimizer's Python update (_step_group), kiln ops under no_grad writing the
  parameters and self.state in place (also traced and fused). Every optimizer has it;
  SGD and Adam switch a group to it (carrying the core's state over) when a scheduler
  changes momentum / betas or load_state_dict() brings state.
"""

import collections
import warnings

from .. import _kiln as _C
from .._kiln import Tensor


def _no_grad():
    from .._functions import no_grad

    return no_grad()


def _to_kiln(value, like=None, keep_dtype=False):
    """A loaded state value (kiln / torch tensor, numpy array) as a kiln tensor on
    like's device (and dtype when floating and not keep_dtype)."""
    from .._functions import tensor

    if not isinstance(value, Tensor):
        if type(value).__module__.startswith("torch"):
            value = value.detach().cpu().numpy()
        value = tensor(value)
    else:
        value = value.detach().clone()
    if like is not None:
        value = value.to(like.device)
        if not keep_dtype and value.dtype.is_floating_point:
            value = value.to(like.dtype)
    return value


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = collections.defaultdict(dict)
        self.param_groups = []
        self._cores = []
        self._counts = {}  # id(param) -> step count (see next_step)
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {type(params).__name__}")
        params = list(params)
        if not params:
            raise _C.KilnValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)

    # -- groups
    def add_param_group(self, param_group):
        group = dict(param_group)
        ps = group["params"]
        group["params"] = [ps] if isinstance(ps, Tensor) else list(ps)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params "
                                f"is {type(p).__name__}")
        if len({id(p) for p in group["params"]}) != len(group["params"]):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error", stacklevel=3)
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise _C.KilnValueError("some parameters appear in more than one parameter group")
        self._check_group(group)
        self.param_groups.append(group)
        self._cores.append(self._make_core(group))

    def _check_group(self, group):
        if group["lr"] < 0:
            raise _C.KilnValueError(f"{type(self).__name__}: Invalid learning rate: "
                                    f"{group['lr']}")

    # -- engines (subclasses with a C++ core override these)
    def _make_core(self, group):
        return None

    def _core_config(self, group):
        return None

    def _export_core(self, group, core):
        """Copies the core's per-parameter state into self.state."""

    def _step_group(self, group):
        raise NotImplementedError(f"{type(self).__name__} is missing _step_group")

    def _leave_core(self, index):
        core = self._cores[index]
        if core is not None:
            self._export_core(self.param_groups[index], core)
            self._cores[index] = None

    # -- training
    def zero_grad(self, set_to_none=True):
        from .._tracer import _library_loop

        with _library_loop():
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
        self._step_count = getattr(self, "_step_count", 0) + 1  # read by the schedulers
        loss = None
        if closure is not None:
            from .._functions import enable_grad

            with enable_grad():
                loss = closure()
        for i, group in enumerate(self.param_groups):
            core = self._cores[i]
            if core is not None and core._config != self._core_config(group):
                self._leave_core(i)  # a hyperparameter changed: the Python update goes on
                core = None
            if core is not None:
                core.set_lr(float(group["lr"]))  # schedulers change group["lr"]
                core.step()
            else:
                with _no_grad():
                    self._step_group(group)
        return loss

    # -- checkpoints
    def state_dict(self):
        """{'state': {index: {name: value}}, 'param_groups': [{..., 'params': [index]}]}
        with parameters numbered in group order, as PyTorch's."""
        for group, core in zip(self.param_groups, self._cores):
            if core is not None:
                self._export_core(group, core)
        index, groups = {}, []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state and self.state[p]:
                    state[index[id(p)]] = dict(self.state[p])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise _C.KilnValueError("loaded state dict has a different number of parameter "
                                    "groups")
        for g, s in zip(self.param_groups, saved):
            if len(g["params"]) != len(s["params"]):
                raise _C.KilnValueError("loaded state dict contains a parameter group that "
                                        "doesn't match the size of optimizer's group")
        by_index = {}
        for g, s in zip(self.param_groups, saved):
            for p, i in zip(g["params"], s["params"]):
                by_index[i] = p
        self.state = collections.defaultdict(dict)
        self._counts = {}
        for i, values in state_dict["state"].items():
            p = by_index.get(int(i))
            if p is None:
                continue
            self.state[p] = {name: _to_kiln(v, p, keep_dtype=(name == "step"))
                             if not isinstance(v, (int, float)) else v
                             for name, v in values.items()}
        for i, (g, s) in enumerate(zip(self.param_groups, saved)):
            params = g["params"]
            g.clear()
            g.update({k: v for k, v in s.items() if k != "params"})
            g["params"] = params
            has_state = any(self.state.get(p) for p in params)
            self._cores[i] = None if has_state else self._make_core(g)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        return "\n".join(lines) + "\n)"


def next_step(opt, p, state):
    """Increments state['step'] (a float32 scalar tensor, as PyTorch 1.13 keeps it) and
    returns the new count as a Python float; the count itself lives in opt._counts, so
    no step reads a tensor back to the host (the tracer keeps the update in its plan)."""
    count = opt._counts.get(id(p))
    if count is None:
        step = state.get("step")
        count = step.item() if isinstance(step, Tensor) else float(step or 0)
    count += 1
    opt._counts[id(p)] = count
    state["step"] = _C.full((), float(count), _C.float32)
    return count


def grad_of(p, maximize):
    return -p.grad if maximize else p.grad
