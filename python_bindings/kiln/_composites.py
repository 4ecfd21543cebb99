"""Everyday PyTorch functions and Tensor methods composed of kiln ops (so autograd and
the tracer see ordinary ops): predicates (isfinite, isnan, isinf, any, all, logical_*),
rounding (floor, ceil, trunc, round, frac; floor_divide, remainder, fmod, // and %),
sign, square, expm1, log2, log10, exp2, lerp, addcmul, addcdiv,
norms (norm, linalg.vector_norm), linear algebra (eye, outer, dot, mv, mm, bmm, addmm,
baddbmm, diag), data movement (flip, roll, repeat_interleave, tile, unbind),
nan_to_num, allclose, equal, var_mean / std_mean, count_nonzero, and the in-place
random fills (normal_, uniform_, bernoulli_, exponential_, random_) on kiln's stream.

Rounding goes through an int64 cast, exact for |x| < 2**52 (larger floats are integers
already and pass through); its results carry no gradient (PyTorch's is zero).
"""

import math

from . import _kiln as _C
from ._kiln import Tensor

__all__ = [
    "isfinite", "isnan", "isinf", "any", "all", "logical_and", "logical_or", "logical_xor",
    "logical_not", "floor", "ceil", "trunc", "fix", "round", "frac", "floor_divide",
    "remainder", "fmod", "sign", "sgn", "square", "expm1", "log2", "log10", "exp2",
    "lerp", "addcmul", "addcdiv", "norm", "eye", "outer", "ger", "dot", "mv",
    "mm", "bmm", "addmm", "baddbmm", "diag", "flip", "roll", "repeat_interleave", "tile",
    "unbind", "nan_to_num", "allclose", "isclose", "equal", "var_mean", "std_mean",
    "count_nonzero", "bernoulli",
]


def _nonzero(x):
    return x if x.dtype == _C.bool else (x != 0)


# ---- predicates

def isnan(input):
    return input != input


def isinf(input):
    if not input.dtype.is_floating_point:
        return _C.zeros(tuple(input.shape), dtype=_C.bool, device=input.device)
    return _C.abs(input) == float("inf")


def isfinite(input):
    if not input.dtype.is_floating_point:
        return _C.ones(tuple(input.shape), dtype=_C.bool, device=input.device)
    return (input == input) & (_C.abs(input) != float("inf"))


def any(input, dim=None, keepdim=False):  # noqa: A001
    hits = _nonzero(input).to(_C.int64)
    total = hits.sum() if dim is None else hits.sum(dim, keepdim=keepdim)
    return total > 0


def all(input, dim=None, keepdim=False):  # noqa: A001
    misses = (~_nonzero(input)).to(_C.int64)
    total = misses.sum() if dim is None else misses.sum(dim, keepdim=keepdim)
    return total == 0


def logical_and(input, other):
    return _nonzero(input) & _nonzero(other)


def logical_or(input, other):
    return _nonzero(input) | _nonzero(other)


def logical_xor(input, other):
    return _nonzero(input) ^ _nonzero(other)


def logical_not(input):
    return ~_nonzero(input)


# ---- rounding

_EXACT = 2.0 ** 52  # floats at least this large are integers


def trunc(input):
    """Rounds toward zero (no gradient)."""
    if not input.dtype.is_floating_point:
        return input.clone()
    x = input.detach()
    big = ~(_C.abs(x) < _EXACT)  # also nan / inf
    safe = _C.where(big, 0.0, x)
    return _C.where(big, x, safe.to(_C.int64).to(x.dtype))


fix = trunc


def floor(input):
    if not input.dtype.is_floating_point:
        return input.clone()
    t = trunc(input)
    return _C.where(t > input.detach(), t - 1.0, t)


def ceil(input):
    if not input.dtype.is_floating_point:
        return input.clone()
    t = trunc(input)
    return _C.where(t < input.detach(), t + 1.0, t)


def round(input, decimals=0):  # noqa: A001
    """Rounds half to even, as PyTorch (no gradient). From the exact split x = t + d
    (t = trunc(x)), so no addition rounds before the decision."""
    if not input.dtype.is_floating_point:
        return input.clone()
    x = input.detach()
    if decimals:
        scale = 10.0 ** decimals
        return round(x * scale) / scale
    t = trunc(x)
    ad = _C.abs(x - t)
    step = _C.where(x < 0, -1.0, 1.0)
    odd = (t - 2.0 * trunc(t * 0.5)) != 0
    up = (ad > 0.5) | ((ad == 0.5) & odd)
    return _C.where(up, t + step, t)


def frac(input):
    return input - trunc(input)


def _divide_float(input, other):
    if isinstance(input, Tensor) and input.dtype.is_floating_point:
        return input / other
    if isinstance(other, Tensor) and other.dtype.is_floating_point:
        return input / other
    a = input.to(_C.float64) if isinstance(input, Tensor) else float(input)
    return a / (other.to(_C.float64) if isinstance(other, Tensor) else float(other))


def _result_dtype(input, other):
    if isinstance(input, Tensor) and isinstance(other, Tensor):
        return _C.result_type(input, other)
    if isinstance(input, Tensor):
        return _C.result_type(input, other)
    return _C.result_type(other, input)


def floor_divide(input, other):
    """floor(input / other), in the promoted dtype (Python's // on tensors)."""
    q = floor(_divide_float(input, other))
    return q.to(_result_dtype(input, other))


def remainder(input, other):
    """input - other * floor(input / other): the sign of other (Python's %)."""
    return (input - other * floor(_divide_float(input, other))).to(_result_dtype(input, other))


def fmod(input, other):
    """input - other * trunc(input / other): the sign of input (C's fmod)."""
    return (input - other * trunc(_divide_float(input, other))).to(_result_dtype(input, other))


# ---- pointwise math

def sign(input):
    if input.dtype == _C.bool:
        return input.clone()
    one = _C.ones((), dtype=input.dtype, device=input.device)
    zero = _C.zeros((), dtype=input.dtype, device=input.device)
    return _C.where(input > 0, one, _C.where(input < 0, -one, zero))  # nan -> 0, as PyTorch


sgn = sign


def square(input):
    return input * input


def expm1(input):
    from .nn._functional_act import expm1 as _expm1

    return _expm1(input)


def log2(input):
    return _C.log(input) * (1.0 / math.log(2.0))


def log10(input):
    return _C.log(input) * (1.0 / math.log(10.0))


def exp2(input):
    return _C.pow(2.0, input) if isinstance(input, Tensor) else 2.0 ** input


def lerp(input, end, weight):
    return input + weight * (end - input)


def addcmul(input, tensor1, tensor2, *, value=1):
    return input + value * tensor1 * tensor2


def addcdiv(input, tensor1, tensor2, *, value=1):
    return input + value * tensor1 / tensor2


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """The p-norm over dim (all elements by default); 'fro' is the 2-norm."""
    from . import linalg

    if p in ("fro", None):
        p = 2.0
    if p == "nuc":
        raise NotImplementedError("norm: the nuclear norm needs an SVD, which kiln lacks")
    return linalg.vector_norm(input, p, dim, keepdim, dtype=dtype)


# ---- linear algebra

def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    from ._functions import _DEFAULT_FLOAT

    m = n if m is None else m
    rows = _C.arange(n, device=device).unsqueeze(1)
    cols = _C.arange(m, device=device).unsqueeze(0)
    out = (rows == cols).to(_DEFAULT_FLOAT if dtype is None else dtype)
    return out.requires_grad_(True) if requires_grad else out


def outer(input, vec2):
    return input.unsqueeze(1) * vec2.unsqueeze(0)


ger = outer


def _check_dims(op, **tensors):
    for name, (t, nd) in tensors.items():
        if t.ndim != nd:
            raise _C.KilnRuntimeError(f"{op}: {name} must be a {nd}D tensor, got {t.ndim}D")


def dot(input, other):
    _check_dims("dot", input=(input, 1), tensor=(other, 1))
    return (input * other).sum()


def mv(input, vec):
    _check_dims("mv", input=(input, 2), vec=(vec, 1))
    return input @ vec


def mm(input, mat2):
    _check_dims("mm", input=(input, 2), mat2=(mat2, 2))
    return input @ mat2


def bmm(input, mat2):
    _check_dims("bmm", input=(input, 3), mat2=(mat2, 3))
    return input @ mat2


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    return beta * input + alpha * mm(mat1, mat2)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return beta * input + alpha * bmm(batch1, batch2)


def diag(input, diagonal=0):
    """1-D: the matrix with input on the diagonal-th diagonal; 2-D: that diagonal."""
    if input.ndim == 1:
        from .nn._functional_spatial import pad

        k = diagonal
        n = input.shape[0] + (k if k >= 0 else -k)
        rows = _C.arange(n, device=input.device).unsqueeze(1)
        cols = _C.arange(n, device=input.device).unsqueeze(0)
        padded = pad(input, (0, k if k >= 0 else -k))
        # k >= 0: out[r, r + k] = x[r] (varies by row); k < 0: out[c - k, c] = x[c]
        src = padded.unsqueeze(1) if k >= 0 else padded.unsqueeze(0)
        zero = _C.zeros((), dtype=input.dtype, device=input.device)
        return _C.where((cols - rows) == k, src.expand(n, n), zero)
    if input.ndim == 2:
        r, c = input.shape
        start_r, start_c = (0, diagonal) if diagonal >= 0 else (-diagonal, 0)
        count = max(min(r - start_r, c - start_c), 0)
        idx = [(start_r + i) * c + start_c + i for i in range(count)]
        return _C.index_select(input.reshape(-1), 0, _index(idx, input.device))
    raise _C.KilnRuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")


# ---- data movement

def _index(values, device):
    from ._functions import tensor

    return tensor(list(values), dtype=_C.int64, device=device)


def flip(input, dims):
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    out = input
    for d in dims:
        n = input.shape[d]
        out = _C.index_select(out, d % input.ndim, _index(range(n - 1, -1, -1), input.device))
    return out


def roll(input, shifts, dims=None):
    if dims is None:
        return roll(input.reshape(-1), shifts, 0).reshape(tuple(input.shape))
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise _C.KilnRuntimeError(f"roll: shifts and dimensions must align. shifts: "
                                  f"{len(shifts)}, dims: {len(dims)}")
    out = input
    for s, d in zip(shifts, dims):
        n = input.shape[d]
        if n:
            out = _C.index_select(out, d % input.ndim,
                                  _index(((i - s) % n for i in range(n)), input.device))
    return out


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each element (along dim; flattened if None) repeated repeats times (an int or
    one count per element)."""
    if repeats is None:  # repeat_interleave(repeats_tensor): indices
        counts = input.tolist()
        return _index((i for i, c in enumerate(counts) for _ in range(c)), input.device)
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else dim % input.ndim
    n = x.shape[d]
    counts = repeats.tolist() if isinstance(repeats, Tensor) else repeats
    if isinstance(counts, int):
        counts = [counts] * n
    if len(counts) not in (1, n):
        raise _C.KilnRuntimeError(f"repeat_interleave: repeats must have the same size as "
                                  f"input along dim, but got repeats.size(0) = {len(counts)} "
                                  f"and input.size({d}) = {n}")
    if len(counts) == 1:
        counts = counts * n
    idx = [i for i, c in enumerate(counts) for _ in range(c)]
    return _C.index_select(x, d, _index(idx, input.device))


def tile(input, dims):
    dims = tuple(dims)
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + dims
    return input.repeat(dims)


def unbind(input, dim=0):
    return tuple(input.select(dim, i) for i in range(input.shape[dim]))


# ---- comparisons and statistics

def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    if not input.dtype.is_floating_point:
        return input.clone()
    info = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
            "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}
    big = info[input.dtype.name]
    out = _C.where(input != input, nan, input)
    out = _C.where(out == float("inf"), big if posinf is None else posinf, out)
    return _C.where(out == float("-inf"), -big if neginf is None else neginf, out)


def isclose(input, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    close = _C.abs(input - other) <= atol + rtol * _C.abs(other)
    close = close | (input == other)  # equal infinities
    if equal_nan:
        close = close | (isnan(input) & isnan(other))
    return close


def allclose(input, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    return bool(all(isclose(input, other, rtol, atol, equal_nan)).item())


def equal(input, other):
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool(all(input == other).item())


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    from ._tensor import var

    mean = input.mean() if dim is None else input.mean(dim, keepdim=keepdim)
    return var(input, dim, unbiased, keepdim, correction=correction), mean


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    v, m = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return _C.sqrt(v), m


def count_nonzero(input, dim=None):
    hits = _nonzero(input).to(_C.int64)
    return hits.sum() if dim is None else hits.sum(dim)


def bernoulli(input, p=None, *, generator=None):
    """1 with probability input (or p), else 0, in input's dtype."""
    prob = input if p is None else p
    u = _C.rand(tuple(input.shape), dtype=_C.float64 if input.dtype == _C.float64
                else _C.float32, device=input.device)
    return (u < prob).to(input.dtype)


# ---- Tensor methods (the functions above, plus in-place forms and random fills)

def _no_grad():
    from ._functions import no_grad

    return no_grad()


def _fill(self, values):
    with _no_grad():
        return self.copy_(values.to(self.dtype))


def _float_like(self):
    return self.dtype if self.dtype.is_floating_point else _C.float32


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    n = _C.randn(tuple(self.shape), dtype=_float_like(self), device=self.device)
    return _fill(self, n * std + mean)


def _uniform_(self, a=0.0, b=1.0, *, generator=None, **kwargs):
    a, b = kwargs.get("from", a), kwargs.get("to", b)
    u = _C.rand(tuple(self.shape), dtype=_float_like(self), device=self.device)
    return _fill(self, u * (b - a) + a)


def _bernoulli_(self, p=0.5, *, generator=None):
    u = _C.rand(tuple(self.shape), dtype=_C.float32, device=self.device)
    return _fill(self, u < p)


def _exponential_(self, lambd=1.0, *, generator=None):
    u = _C.rand(tuple(self.shape), dtype=_float_like(self), device=self.device)
    return _fill(self, -_C.log(1.0 - u) / lambd)


def _random_(self, low=0, high=None, *, generator=None):
    from ._random import randint

    if high is None:
        low, high = 0, low if low else 2 ** 24
    return _fill(self, randint(low, high, tuple(self.shape), device=self.device))


def _fill_diagonal_(self, fill_value, wrap=False):
    if self.ndim != 2:
        raise _C.KilnRuntimeError("fill_diagonal_: kiln supports 2-D tensors only")
    rows = _C.arange(self.shape[0], device=self.device).unsqueeze(1)
    cols = _C.arange(self.shape[1], device=self.device).unsqueeze(0)
    on = rows == cols
    if wrap and self.shape[0] > self.shape[1] + 1:
        on = (rows % (self.shape[1] + 1)) == cols
    with _no_grad():
        return self.copy_(_C.where(on, fill_value, self))


def _index_fill_(self, dim, index, value):
    n = self.shape[dim]
    hit = (_C.arange(n, device=self.device).unsqueeze(1) == index.reshape(1, -1)).to(
        _C.int64).sum(1) > 0
    shape = [1] * self.ndim
    shape[dim] = n
    with _no_grad():
        return self.copy_(_C.where(hit.reshape(shape), value, self))


def _inplace(fn):
    def method(self, *args, **kwargs):
        with _no_grad() if not self.requires_grad else _Nothing():
            return self.copy_(fn(self, *args, **kwargs))

    method.__name__ = fn.__name__ + "_"
    return method


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _varargs(fn):
    """x.flip(0, 1) as well as x.flip((0, 1))."""

    def method(self, *dims, **kwargs):
        if len(dims) == 1:
            return fn(self, dims[0], **kwargs)
        return fn(self, dims, **kwargs) if dims else fn(self, **kwargs)

    method.__name__ = fn.__name__
    return method


for _name in __all__:
    if _name in ("eye", "allclose", "equal", "bernoulli") or hasattr(Tensor, _name):
        continue
    setattr(Tensor, _name, globals()[_name])
Tensor.flip = _varargs(flip)
Tensor.logical_not = logical_not
Tensor.tile = _varargs(tile)
Tensor.allclose = allclose
Tensor.equal = equal
Tensor.bernoulli = lambda self, p=None, *, generator=None: bernoulli(self, p)
Tensor.normal_ = _normal_
Tensor.uniform_ = _uniform_
Tensor.bernoulli_ = _bernoulli_
Tensor.exponential_ = _exponential_
Tensor.random_ = _random_
Tensor.fill_diagonal_ = _fill_diagonal_
Tensor.index_fill_ = _index_fill_
for _fn in (floor, ceil, trunc, round, frac, sign, square, lerp, addcmul, addcdiv, _C.log1p,
            expm1, log2, log10, nan_to_num, logical_not, remainder, fmod, floor_divide):
    if not hasattr(Tensor, _fn.__name__ + "_"):
        setattr(Tensor, _fn.__name__ + "_", _inplace(_fn))
Tensor.__floordiv__ = floor_divide
Tensor.__rfloordiv__ = lambda self, other: floor_divide(other, self)
Tensor.__mod__ = remainder
Tensor.__rmod__ = lambda self, other: remainder(other, self)
Tensor.true_divide = lambda self, other: _C.div(self, other)
del _name, _fn


def _with_alpha(op):
    """input op alpha * other, PyTorch's alpha keyword (add, sub and their in-place forms)."""

    def method(self, other, *, alpha=1, **kwargs):
        return op(self, other if alpha == 1 else other * alpha, **kwargs)

    method.__name__ = getattr(op, "__name__", "op")
    return method


for _name in ("add", "sub", "add_", "sub_"):
    setattr(Tensor, _name, _with_alpha(getattr(Tensor, _name)))
add = _with_alpha(_C.add)
sub = _with_alpha(_C.sub)
subtract = sub
__all__ += ["add", "sub", "subtract"]
del _name
