"""parameters_to_vector / vector_to_parameters."""

from ... import _kiln as _C
from ..._kiln import Tensor


def parameters_to_vector(parameters):
    """One 1-D tensor holding every parameter, flattened and concatenated."""
    return _C.cat([p.reshape(-1) for p in parameters], 0)


def vector_to_parameters(vec, parameters):
    """Copies consecutive slices of vec into the parameters (in place, no history)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    from ..._functions import no_grad

    offset = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[offset:offset + n].reshape(tuple(p.shape)))
            offset += n
