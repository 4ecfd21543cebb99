"""clip_grad_norm_ and clip_grad_value_ (PyTorch's formulas, in place on .grad)."""

from ... import _kiln as _C
from ..._kiln import Tensor


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scales the gradients so that their joint norm_type-norm is at most max_norm
    (factor max_norm / (norm + 1e-6), capped at 1); returns the norm before clipping."""
    from ..._functions import no_grad
    from ..._tracer import _library_loop

    grads = _grads(parameters)
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not grads:
        return _C.zeros(())
    with no_grad(), _library_loop():
        if norm_type == float("inf"):
            norms = [g.abs().amax() for g in grads]
            total = norms[0] if len(norms) == 1 else _C.stack(norms).amax()
        elif norm_type == 2.0:  # the usual case: sqrt(sum(g * g)), as vector_norm's p=2 path
            norms = [(g * g).sum().sqrt() for g in grads]
            stacked = _C.stack(norms)
            total = (stacked * stacked).sum().sqrt()
        else:
            norms = [(g.abs() ** norm_type).sum() ** (1.0 / norm_type) for g in grads]
            total = (_C.stack(norms) ** norm_type).sum() ** (1.0 / norm_type)
        if error_if_nonfinite:
            t = total.item()
            if t != t or t in (float("inf"), float("-inf")):
                raise _C.KilnRuntimeError(
                    f"The total norm of order {norm_type} for gradients from `parameters` is "
                    "non-finite, so it cannot be clipped. To disable this error and scale the "
                    "gradients by the non-finite norm anyway, set "
                    "`error_if_nonfinite=False`")
        coef = _C.clamp(max_norm / (total + 1e-6), None, 1.0)
        coefs = {}  # one cast per gradient dtype, then one in-place multiply per gradient
        for g in grads:
            if g.dtype not in coefs:
                coefs[g.dtype] = coef.to(g.dtype)
            g.mul_(coefs[g.dtype])
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient element to [-clip_value, clip_value]."""
    from ..._functions import no_grad

    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)
