"""kiln.linalg: vector_norm, norm (vectors) and matrix_norm ('fro'), as torch.linalg.
Decompositions (qr, svd, eigh, ...) need kernels kiln does not have yet."""

from .. import _kiln as _C


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """(sum |x|^ord)^(1/ord) over dim (all elements if None); ord inf / -inf: max / min
    of |x|; ord 0: the count of non-zeros."""
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        raise _C.DTypeError(f"linalg.vector_norm: Expected a floating point tensor as input. "
                            f"Got {x.dtype}")
    a = _C.abs(x)
    dims = tuple(range(x.ndim)) if dim is None else dim
    if ord == float("inf"):
        return a.amax(dims, keepdim=keepdim)
    if ord == float("-inf"):
        return a.amin(dims, keepdim=keepdim)
    if ord == 0:
        return (a != 0).to(x.dtype).sum(dims, keepdim=keepdim)
    if ord == 1:
        return a.sum(dims, keepdim=keepdim)
    if ord == 2:
        return _C.sqrt((x * x).sum(dims, keepdim=keepdim))
    return (a ** ord).sum(dims, keepdim=keepdim) ** (1.0 / ord)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    if ord != "fro":
        raise NotImplementedError(f"linalg.matrix_norm: ord={ord!r} needs an SVD or "
                                  "reductions kiln lacks; only 'fro' is supported")
    return vector_norm(A, 2, dim, keepdim, dtype=dtype)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """Vector norms (ord a number, or None: 2-norm of the flattened input); 'fro' for
    matrices."""
    if isinstance(ord, str):
        return matrix_norm(A, ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
