"""Tensor.register_hook and kiln.autograd.Function: Python code inside a backward pass
(the engine side is ops/autograd/hooks.h; kiln.nn's module backward hooks use both)."""

from . import _kiln as _C
from ._kiln import Tensor


class RemovableHandle:
    """What Tensor.register_hook returns: remove() takes the hook out (twice: a no-op);
    also a context manager that removes it on exit."""

    def __init__(self, handle):
        self._handle = handle

    def remove(self):
        self._handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_hook(self, hook):
    """hook(grad) -> None or a replacement grad, called when the gradient of this tensor
    is computed (before a leaf accumulates it into .grad). Returns a handle with
    remove(). Raises RuntimeError on a tensor that does not require grad."""
    if not callable(hook):
        raise TypeError(f"[register_hook] hook must be callable, got {type(hook).__name__}")
    return RemovableHandle(_C._register_hook(self, hook))


Tensor.register_hook = register_hook


class FunctionCtx:
    """The ctx of a Function: save_for_backward / saved_tensors, needs_input_grad,
    mark_non_differentiable, set_materialize_grads; any other attribute is free."""

    def __init__(self):
        self._saved = ()
        self._non_differentiable = set()
        self.materialize_grads = True
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self._saved = tensors

    @property
    def saved_tensors(self):
        return tuple(self._saved)

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)


class Function:
    """A custom differentiable op, as torch.autograd.Function: subclass it with static
    forward(ctx, *args) and backward(ctx, *grad_outputs) (one gradient or None per
    forward argument) and call Cls.apply(*args). forward runs without grad tracking."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__}: call {type(self).__name__}.apply(...) "
                           "instead of instantiating a Function (legacy autograd functions "
                           "are not supported)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        from ._functions import no_grad

        ctx = FunctionCtx()
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            result = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(result, tuple)
        outs = (result,) if single else result
        out_pos = [i for i, o in enumerate(outs) if isinstance(o, Tensor)]
        tensors = [outs[i] for i in out_pos]
        if not tensors or not _C.is_grad_enabled() or not any(ctx.needs_input_grad):
            return result
        like = [(t.shape, t.dtype, t.device) for t in tensors]
        n_args, n_outs, name = len(args), len(outs), cls.__name__ + "Backward"

        def backward(grads):
            if ctx.materialize_grads:
                grads = [g if g is not None else _C.zeros(s, dtype=d, device=dev)
                         for g, (s, d, dev) in zip(grads, like)]
            full = [None] * n_outs
            for k, i in enumerate(out_pos):
                full[i] = grads[k]
            res = cls.backward(ctx, *full)
            if not isinstance(res, tuple):
                res = (res,)
            if len(res) < n_args or any(r is not None for r in res[n_args:]):
                raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                                   f"(expected {n_args}, got {len(res)})")
            return [res[i] for i in positions]

        diff = [id(t) not in ctx._non_differentiable for t in tensors]
        new = _C._record_function(name, backward, [args[i] for i in positions], tensors, diff)
        outs = list(outs)
        for k, i in enumerate(out_pos):
            outs[i] = new[k]
        return outs[0] if single else tuple(outs)

    vjp = backward
