"""What the bench models need from the framework and kiln does not have yet.

`prepare(fw)` is called once per worker. For PyTorch it does nothing. For kiln it adds a
stand-in for each missing piece that is a composite of ops kiln already has, and returns
one note per stand-in, so that the table says exactly what was missing (the stand-ins
disappear by themselves once kiln has the real thing). A missing piece with no stand-in
raises `Missing` naming it, and the model's cells read "missing: ...".
"""

import types


class Missing(RuntimeError):
    """A model needs a feature the framework does not have (named in the message)."""


def is_kiln(fw):
    return fw.__name__ == "kiln"


def _randint(fw):
    def randint(low, high=None, size=None, *, dtype=None, device=None):
        """torch.randint(low=0, high, size): int64(rand * (high - low)) + low (the cast
        truncates, and rand is in [0, 1), so this is the floor)."""
        if size is None:
            low, high, size = 0, low, high
        u = fw.rand(tuple(size), device=device)
        out = (u * (high - low)).to(fw.int64) + low
        return out if dtype is None else out.to(dtype)

    return randint


def _clip_grad_norm(fw):
    def clip_grad_norm_(parameters, max_norm, norm_type=2.0):
        """PyTorch's formula: grads scaled by min(1, max_norm / (total 2-norm + 1e-6));
        returns the total norm (a tensor, no host read)."""
        if float(norm_type) != 2.0:
            raise Missing("kiln.nn.utils.clip_grad_norm_ stand-in: only norm_type 2")
        grads = [p.grad for p in parameters if p.grad is not None]
        with fw.no_grad():
            total = fw.stack([(g * g).sum() for g in grads]).sum().sqrt()
            coef = fw.clamp(float(max_norm) / (total + 1e-6), None, 1.0)
            for g in grads:
                g.copy_(g * coef)
        return total

    return clip_grad_norm_


def prepare(fw):
    """Adds kiln's missing composites (see the module doc); returns the notes."""
    notes = []
    if not is_kiln(fw):
        return notes
    if not hasattr(fw, "randint"):
        fw.randint = _randint(fw)
        notes.append("kiln.randint missing: bench stand-in int64(rand * n)")
    if not hasattr(fw.nn, "utils") or not hasattr(fw.nn.utils, "clip_grad_norm_"):
        utils = getattr(fw.nn, "utils", None) or types.ModuleType("kiln.nn.utils")
        utils.clip_grad_norm_ = _clip_grad_norm(fw)
        fw.nn.utils = utils
        notes.append("kiln.nn.utils.clip_grad_norm_ missing: bench stand-in (stack, sum, "
                     "sqrt, clamp; no host read)")
    if not hasattr(fw.Tensor, "pin_memory"):
        fw.Tensor.pin_memory = lambda self, device=None: self
        notes.append("Tensor.pin_memory missing: bench stand-in returns the tensor "
                     "(kiln has no pinned host memory)")
    return notes


def require(fw, owner, name, what):
    """owner.name, or Missing naming `what` when the framework lacks it."""
    if not hasattr(owner, name):
        raise Missing(f"{fw.__name__} lacks {what}")
    return getattr(owner, name)
