"""PyTorch's spellings of the ops along one dim (C++ ops, ops/ops.def): gather, scatter,
scatter_add, index_add, sort, argsort, topk (values and indices as named tuples, like
torch.return_types), cumsum, cumprod, prod, multinomial, nonzero, masked_select; their
Tensor methods and the in-place forms scatter_, scatter_add_, index_add_, cumsum_,
cumprod_.

nonzero and masked_select have output shapes that depend on the values: each is a graph
break (the trace ends there, and kiln.explain() names it).

sort is always stable (stable=False may return any valid order; this is one) and NaN
sorts as the largest value; topk's results are always sorted.
"""

import collections

from . import _kiln as _C
from ._kiln import Tensor

__all__ = ["gather", "scatter", "scatter_add", "index_add", "sort", "argsort", "topk",
           "cumsum", "cumprod", "prod", "multinomial", "nonzero", "argwhere", "masked_select"]

_SortResult = collections.namedtuple("sort", ["values", "indices"])
_TopkResult = collections.namedtuple("topk", ["values", "indices"])


def gather(input, dim, index, *, sparse_grad=False):
    return _C.gather(input, dim, index)


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    if src is None:
        src = value
    if src is None:
        raise TypeError("[scatter] expected src (a tensor) or value (a number)")
    if reduce not in (None, "add"):
        raise RuntimeError(f"[scatter] reduce={reduce!r} is not supported (use None or 'add')")
    if not isinstance(src, Tensor):
        if reduce == "add":
            src = _C.full(list(index.shape), src, dtype=input.dtype, device=input.device)
        else:
            return _C._scatter_value(input, dim, index, src)
    if reduce == "add":
        return _C.scatter_add(input, dim, index, src)
    return _C.scatter(input, dim, index, src)


def scatter_add(input, dim, index, src):
    return _C.scatter_add(input, dim, index, src)


def index_add(input, dim, index, source, *, alpha=1):
    return _C.index_add(input, dim, index, source, alpha)


def sort(input, dim=-1, descending=False, *, stable=False):
    return _SortResult(*_C.sort(input, dim, descending, bool(stable)))


def argsort(input, dim=-1, descending=False, stable=False):
    return _C.argsort(input, dim, descending, bool(stable))


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    return _TopkResult(*_C.topk(input, int(k), dim, largest, sorted))


def _cast(input, dtype):
    return input if dtype is None else input.to(dtype)


def cumsum(input, dim, *, dtype=None):
    return _C.cumsum(_cast(input, dtype), dim)


def cumprod(input, dim, *, dtype=None):
    return _C.cumprod(_cast(input, dtype), dim)


def prod(input, dim=None, keepdim=False, *, dtype=None):
    return _C.prod(_cast(input, dtype), dim, keepdim)


def multinomial(input, num_samples, replacement=False, *, generator=None):
    if generator is None:
        return _C.multinomial(input, int(num_samples), bool(replacement))
    seed = int(generator._numpy().integers(0, 2 ** 62))
    return _C.multinomial(input, int(num_samples), bool(replacement), seed, 0)


def nonzero(input, *, as_tuple=False):
    coords = _C.nonzero(input)
    if not as_tuple:
        return coords
    if input.ndim == 0:
        return (_C.nonzero(input.reshape(1)).reshape(-1),)
    return tuple(coords.select(1, d) for d in range(input.ndim))


def argwhere(input):
    return _C.nonzero(input)


def masked_select(input, mask):
    return _C.masked_select(input, mask)


def _in_place(fn):
    def method(self, *args, **kwargs):
        return self.copy_(fn(self, *args, **kwargs))

    method.__name__ = fn.__name__ + "_"
    return method


for _fn in (gather, scatter, scatter_add, index_add, sort, argsort, topk, cumsum, cumprod,
            prod, multinomial, nonzero, argwhere, masked_select):
    setattr(Tensor, _fn.__name__, _fn)
for _fn in (scatter, scatter_add, index_add, cumsum, cumprod):
    setattr(Tensor, _fn.__name__ + "_", _in_place(_fn))
Tensor.msort = lambda self: sort(self, 0).values
del _fn
