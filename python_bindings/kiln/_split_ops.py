"""More everyday functions composed of kiln ops: the split variants (tensor_split,
hsplit, vsplit, dsplit: views, like split and chunk), fliplr / flipud, addbmm / addmv,
randint_like, and get_rng_state / set_rng_state (the global Philox stream behind
rand / randn / randint / dropout / nn.init, as an int64 tensor [seed_lo, seed_hi,
offset_lo, offset_hi]; a kiln.Generator has its own get_state / set_state)."""

import builtins

from . import _kiln as _C
from ._kiln import Tensor

__all__ = ["tensor_split", "hsplit", "vsplit", "dsplit", "fliplr", "flipud", "addbmm",
           "addmv", "randint_like", "get_rng_state", "set_rng_state"]


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, builtins.bool)


def tensor_split(input, indices_or_sections, dim=0):
    """Views of input along dim: n near-equal parts (the first size % n one longer),
    or the pieces between the given indices."""
    if input.ndim == 0:
        raise _C.KilnRuntimeError("tensor_split: expected at least a 1-dimensional tensor, "
                                  "but got a tensor with 0 dims")
    d = dim % input.ndim if -input.ndim <= dim < input.ndim else None
    if d is None:
        raise _C.KilnIndexError(f"tensor_split: Dimension out of range (expected to be in range "
                                f"of [{-input.ndim}, {input.ndim - 1}], but got {dim})")
    size = input.shape[d]
    spec = indices_or_sections
    if isinstance(spec, Tensor):
        if spec.ndim > 1 or spec.dtype not in (_C.int64, _C.int32):
            raise _C.KilnRuntimeError("tensor_split expected tensor_indices_or_sections to have "
                                      "a long dtype and be 0D or 1D")
        spec = spec.item() if spec.ndim == 0 else spec.tolist()
    if _is_int(spec):
        if spec <= 0:
            raise _C.KilnRuntimeError(f"tensor_split: number of sections must be larger than 0, "
                                      f"got {spec}")
        q, r = divmod(size, spec)
        bounds, start = [], 0
        for i in range(spec):
            start += q + (1 if i < r else 0)
            bounds.append(start)
        bounds = bounds[:-1]
    elif isinstance(spec, (tuple, list)) and builtins.all(_is_int(i) for i in spec):
        bounds = list(spec)
    else:
        raise TypeError("tensor_split(): argument 'indices_or_sections' must be an int, a "
                        f"sequence of ints or a tensor, got {type(indices_or_sections).__name__}")
    out, start = [], 0
    for b in bounds + [size]:
        b = builtins.max(0, builtins.min(size, b + size if b < 0 else b))
        stop = builtins.max(start, b)
        out.append(input.narrow(d, start, stop - start))
        start = stop
    return tuple(out)


def _split_dim(name, input, spec, dim, min_dim):
    if input.ndim < min_dim:
        raise _C.KilnRuntimeError(f"torch.{name} requires a tensor with at least {min_dim} "
                                  f"dimension, but got a tensor with {input.ndim} dimensions!")
    if _is_int(spec) and (spec == 0 or input.shape[dim] % spec):
        raise _C.KilnRuntimeError(f"torch.{name} attempted to split along dimension {dim}, but "
                                  f"the size of the dimension {input.shape[dim]} is not "
                                  f"divisible by the split_size {spec}!")
    return tensor_split(input, spec, dim)


def hsplit(input, indices_or_sections):
    return _split_dim("hsplit", input, indices_or_sections, 0 if input.ndim == 1 else 1, 1)


def vsplit(input, indices_or_sections):
    return _split_dim("vsplit", input, indices_or_sections, 0, 2)


def dsplit(input, indices_or_sections):
    return _split_dim("dsplit", input, indices_or_sections, 2, 3)


def fliplr(input):
    if input.ndim < 2:
        raise _C.KilnRuntimeError("fliplr: Input must be >= 2-d.")
    return input.flip(1)


def flipud(input):
    if input.ndim < 1:
        raise _C.KilnRuntimeError("flipud: Input must be >= 1-d.")
    return input.flip(0)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * sum_b batch1[b] @ batch2[b]."""
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise _C.KilnRuntimeError(f"addbmm: batch1 must be a 3D tensor (got {batch1.ndim}D) and "
                                  f"batch2 must be a 3D tensor (got {batch2.ndim}D)")
    prod = (batch1 @ batch2).sum(0)
    return (input if beta == 1 else input * beta) + (prod if alpha == 1 else prod * alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """beta * input + alpha * (mat @ vec)."""
    if mat.ndim != 2 or vec.ndim != 1:
        raise _C.KilnRuntimeError(f"addmv: vector + matrix @ vector expected, got {input.ndim}, "
                                  f"{mat.ndim}, {vec.ndim}")
    prod = mat @ vec
    return (input if beta == 1 else input * beta) + (prod if alpha == 1 else prod * alpha)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False):
    """randint with input's shape (and dtype and device unless given)."""
    from ._random import randint

    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(input.shape), dtype=dtype or input.dtype,
                   device=device or input.device, requires_grad=requires_grad)


def get_rng_state():
    seed, offset = _C._random_state()
    mask = 0xFFFF_FFFF
    from ._functions import tensor

    return tensor([seed & mask, seed >> 32, offset & mask, offset >> 32], dtype=_C.int64)


def set_rng_state(new_state):
    if not isinstance(new_state, Tensor) or tuple(new_state.shape) != (4,):
        raise TypeError("set_rng_state: expected the tensor kiln.get_rng_state() returned")
    lo, hi, olo, ohi = (int(v) for v in new_state.tolist())
    _C._restore_random_state(lo | (hi << 32), olo | (ohi << 32))


for _name in ("tensor_split", "hsplit", "vsplit", "dsplit", "fliplr", "flipud", "addbmm",
              "addmv"):
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, globals()[_name])
del _name
