"""Gradient checkpointing: checkpoint(fn, *args) runs fn without keeping its
activations for backward; backward recomputes the segment (with the same random
numbers) and backpropagates through it. Memory for compute."""

from .. import _kiln as _C
from .._kiln import Tensor


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """function(*args, **kwargs) -> a tensor or a tuple of tensors; only the tensor
    arguments are saved (non-tensor arguments are passed through as they are)."""
    slots = [i for i, a in enumerate(args) if isinstance(a, Tensor)]

    def segment(*tensors):
        full = list(args)
        for i, t in zip(slots, tensors):
            full[i] = t
        return function(*full, **kwargs)

    probe = []

    def recorded(*tensors):
        out = segment(*tensors)
        probe.append(isinstance(out, Tensor))
        return out

    outputs = _C._checkpoint(recorded, [args[i] for i in slots])
    return outputs[0] if probe and probe[0] else tuple(outputs)


checkpoint.checkpoint = checkpoint  # torch.utils.checkpoint.checkpoint spelling too
