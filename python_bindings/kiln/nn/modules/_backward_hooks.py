"""Module backward hooks (register_full_backward_hook / register_full_backward_pre_hook)
with PyTorch's semantics: the module's tensor inputs and outputs pass through an
identity node each call, whose backward calls the hooks:

- the output node's backward gets grad_output (one entry per output, None for a
  non-tensor or one without a gradient) and runs the pre-hooks, hook(module,
  grad_output) -> None or a new grad_output, before the module's own backward;
- the input node's backward gets grad_input (one entry per positional argument) and
  runs hook(module, grad_input, grad_output) -> None or a new grad_input, whose values
  then flow on to the inputs.
"""

from ... import _kiln as _C
from ..._kiln import Tensor


def _pack(indices, values, size):
    res = [None] * size
    for i, v in zip(indices, values):
        res[i] = v
    return tuple(res)


def _checked(out, expected, what):
    if not isinstance(out, (tuple, list)):
        out = (out,)
    if len(out) != expected:
        raise RuntimeError(f"Backward {what} hook returned an invalid number of grad_"
                           f"{'output' if what == 'pre' else 'input'}, got {len(out)}, but "
                           f"expected {expected}")
    return tuple(out)


class BackwardHook:
    """One module call's hooks: setup_input_hook(args) before forward,
    setup_output_hook(output) after it."""

    def __init__(self, module, hooks, pre_hooks):
        self.module = module
        self.hooks = hooks
        self.pre_hooks = pre_hooks
        self.grad_outputs = None
        self.n_inputs = 0
        self.input_index = None
        self.n_outputs = 0
        self.output_index = None

    def _identity(self, args, backward):
        """args with their tensors replaced by outputs of one identity node whose
        backward is backward(grads); None for the index when no tensor needs grad."""
        index = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in index]
        if not (_C.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return args, None
        name = "BackwardHookFunctionBackward"
        new = _C._record_function(name, backward, tensors, tensors,
                                  [t.requires_grad for t in tensors])
        args = list(args)
        for i, t in zip(index, new):
            args[i] = t
        return tuple(args), index

    def setup_input_hook(self, args):
        # grad_input has zeros where no gradient arrived at a tensor input (torch's)
        like = [(a.shape, a.dtype, a.device) for a in args if isinstance(a, Tensor)]

        def backward(grads):
            grads = [g if g is not None else _C.zeros(s, dtype=d, device=dev)
                     for g, (s, d, dev) in zip(grads, like)]
            if self.grad_outputs is None:  # the gradient did not pass through the output
                return grads
            res = _pack(self.input_index, grads, self.n_inputs)
            for hook in list(self.hooks.values()):
                out = hook(self.module, res, self.grad_outputs)
                if out is not None:
                    res = _checked(out, len(res), "full")
            self.grad_outputs = None
            return [res[i] for i in self.input_index]

        args, self.input_index = self._identity(args, backward)
        self.n_inputs = len(args)
        return args

    def setup_output_hook(self, output):
        def backward(grads):
            self.grad_outputs = _pack(self.output_index, grads, self.n_outputs)
            for hook in list(self.pre_hooks.values()):
                out = hook(self.module, self.grad_outputs)
                if out is not None:
                    self.grad_outputs = _checked(out, self.n_outputs, "pre")
            if self.input_index is None:  # no input needs a gradient: call the hooks here
                grad_inputs = (None,) * self.n_inputs
                for hook in list(self.hooks.values()):
                    res = hook(self.module, grad_inputs, self.grad_outputs)
                    if res is not None and not (isinstance(res, tuple)
                                                and all(r is None for r in res)):
                        raise RuntimeError("Backward hook for Modules where no input requires "
                                           "gradient should always return None or None for "
                                           "all gradients.")
                grad_outputs, self.grad_outputs = self.grad_outputs, None
                return [grad_outputs[i] for i in self.output_index]
            return [self.grad_outputs[i] for i in self.output_index]

        single = not isinstance(output, tuple)
        outs = (output,) if single else output
        new, self.output_index = self._identity(outs, backward)
        self.n_outputs = len(outs)
        return new[0] if single else new
