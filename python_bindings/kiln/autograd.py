"""kiln.autograd: reverse-mode gradients (the engine is C++: ops/autograd).

    x = kiln.randn(3, requires_grad=True)
    (x * x).sum().backward()      # x.grad == 2 * x
    gx, = kiln.autograd.grad((x * x).sum(), x)
"""

from . import _after_backward
from . import _kiln as _C
from ._kiln import Tensor
from ._functions import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, Tensor):
        return [x]
    return list(x)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulates the gradients of tensors (seeded with grad_tensors, 1 by default
    for one-element tensors) into the leaves' .grad."""
    if create_graph or inputs is not None:
        raise _C.KilnRuntimeError("[backward] create_graph and inputs are not supported")
    _C._autograd_backward(_as_list(tensors), _as_list(grad_tensors), bool(retain_graph))
    if _after_backward._queued:
        _after_backward.run()


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """The gradients of outputs with respect to inputs, as a tuple (the leaves' .grad
    are left alone); None for an unused input when allow_unused."""
    if create_graph:
        raise _C.KilnRuntimeError("[grad] create_graph=True (higher-order gradients) is not "
                                  "supported by kiln's autograd")
    result = _C._autograd_grad(_as_list(outputs), _as_list(inputs), _as_list(grad_outputs),
                               bool(retain_graph), bool(allow_unused))
    return tuple(result)


from ._hooks import Function, FunctionCtx  # noqa: E402,F401
