"""PyTorch spellings on kiln.Tensor that need Python-side argument handling.

The extension defines the fast paths (operators, views, reductions, in-place ops);
this module adds ``shape``/``size()``, ``to(...)``, ``max``/``min`` returning
(values, indices), ``var``/``std``, ``numpy()``, DLPack, ``repr`` and friends.
"""

import collections

from . import _after_backward, _autocast
from . import _kiln as _C
from ._kiln import Tensor
from ._size import Size
from ._printing import tensor_repr

# torch.return_types-like results of max(dim) / min(dim)
MaxResult = collections.namedtuple("max", ["values", "indices"])
MinResult = collections.namedtuple("min", ["values", "indices"])


def _method(fn, name=None):
    setattr(Tensor, name or fn.__name__, fn)
    return fn


# ---- metadata

_new_size = tuple.__new__  # the extension already returns a tuple of ints
Tensor.shape = property(lambda self: _new_size(Size, self._sizes), doc="The sizes, as a kiln.Size.")
Tensor.__array_priority__ = 1000  # numpy defers `ndarray op tensor` to the tensor


# ---- autograd (ops/autograd in C++)

class _GradFn:
    """The backward node of a tensor with history (read-only: its name)."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name

    def __repr__(self):
        return f"<{self._name}>"


def _grad_fn(self):
    name = _C._tensor_grad_fn_name(self)
    return _GradFn(name) if name else None


Tensor.data = property(_C._tensor_data,
                       doc="The same values without history (shares storage; unlike detach(), "
                           "writes through it are not checked by autograd).")
Tensor.requires_grad = property(_C._tensor_requires_grad,
                                lambda self, flag: _C._requires_grad_(self, bool(flag)))
Tensor.grad = property(_C._tensor_grad, _C._tensor_set_grad,
                       doc="The accumulated gradient, or None.")
Tensor.is_leaf = property(_C._tensor_is_leaf)
Tensor.grad_fn = property(_grad_fn)
Tensor.requires_grad_ = _C._requires_grad_
Tensor.retain_grad = _C._tensor_retain_grad


@_method
def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulates d(self)/d(leaf) into every leaf's .grad (gradient defaults to 1 for
    a one-element tensor)."""
    if create_graph:
        raise _C.KilnRuntimeError("[backward] create_graph=True (higher-order gradients) "
                                  "is not supported by kiln's autograd")
    if inputs is not None:
        raise _C.KilnRuntimeError("[backward] inputs= is not supported; use kiln.autograd.grad")
    _C._tensor_backward(self, gradient, bool(retain_graph))
    if _after_backward._queued:
        _after_backward.run()


@_method
def size(self, dim=None):
    """The sizes as a kiln.Size, or the size of one dim."""
    return _new_size(Size, self._sizes) if dim is None else self._size(dim)


@_method
def stride(self, dim=None):
    """The strides (in elements), or the stride of one dim."""
    return tuple(self._strides) if dim is None else self._stride(dim)


@_method
def is_floating_point(self):
    return self.dtype.is_floating_point


# ---- conversions

def _parse_to(args, kwargs, self_dtype):
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, _C.dtype) or a in (float, int, bool):
            dtype = a
        elif isinstance(a, (str, _C.device)) or type(a).__name__ == "device":
            device = a
        elif isinstance(a, bool):  # non_blocking passed positionally
            pass
        elif isinstance(a, int):
            device = _C.device(f"cuda:{a}")
        else:
            raise TypeError(f"to() received an invalid argument of type {type(a).__name__}; "
                            "expected a dtype, a device (or string) or a Tensor")
    return dtype, device, copy


@_method
def to(self, *args, **kwargs):
    """to(device), to(dtype), to(device, dtype), to(other), to(device=..., dtype=...)."""
    dtype, device, copy = _parse_to(args, dict(kwargs), self.dtype)
    result = self
    if device is not None:
        result = result._to_device(device)
    if dtype is not None:
        result = result._to_dtype(dtype)
    if copy and result._same(self):
        result = result.clone()
    return result


def _type(self, dtype=None):
    if dtype is None:
        return f"kiln.{self.dtype.name}"
    return self._to_dtype(dtype)


Tensor.type = _type


@_method
def numpy(self, force=False):
    """A numpy array sharing this tensor's memory (CPU tensors only)."""
    import numpy as np

    if force and self.device.type != "cpu":
        return np.asarray(self.cpu())
    return np.asarray(self)


def _dlpack(self, stream=None, max_version=None, dl_device=None, copy=None):
    if dl_device is not None:
        dev_type, dev_id = dl_device
        if (dev_type, dev_id) != self.__dlpack_device__():
            raise BufferError("kiln: __dlpack__ to another device is not supported")
    source = self.clone() if copy else self
    return _C._to_dlpack(source)


Tensor.__dlpack__ = _dlpack


# ---- printing, iteration

Tensor.__repr__ = lambda self: tensor_repr(self)
Tensor.__str__ = lambda self: tensor_repr(self)


def _format(self, spec):
    if self.ndim == 0:
        return format(self.item(), spec)
    return format(tensor_repr(self), spec)


Tensor.__format__ = _format


def _iter(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return (self.select(0, i) for i in range(self._size(0)))


Tensor.__iter__ = _iter
Tensor.__reversed__ = lambda self: (self.select(0, i) for i in reversed(range(len(self))))


def _contains(self, element):
    if isinstance(element, (Tensor, int, float, bool)):
        return bool((self == element).sum().item() > 0)
    raise TypeError(f"Tensor.__contains__ only supports Tensor or scalar, got {type(element)}")


Tensor.__contains__ = _contains


# ---- reductions with PyTorch's variants

def _minmax(self, dim, keepdim, other, is_max):
    name = "max" if is_max else "min"
    if isinstance(dim, Tensor):
        other, dim = dim, None
    if other is not None:
        return _C.maximum(self, other) if is_max else _C.minimum(self, other)
    if dim is None:
        if keepdim:
            raise TypeError(f"{name}() got keepdim without dim")
        return _C._max_all(self) if is_max else _C._min_all(self)
    if isinstance(dim, (tuple, list)):
        raise TypeError(f"{name}(dim) takes one dim; use amax/amin for several")
    values = _C.amax(self, dim, keepdim) if is_max else _C.amin(self, dim, keepdim)
    if is_max:
        return MaxResult(values, _C.argmax(self, dim, keepdim))
    return MinResult(values, _argmin(self, dim, keepdim))


def _argmin(self, dim=None, keepdim=False):
    source = self.to(_C.int64) if self.dtype == _C.bool else self
    return _C.argmax(-source, dim, keepdim)


def max(self, dim=None, keepdim=False, *, other=None):  # noqa: A001
    """max() of all elements; max(dim) -> (values, indices); max(other) -> maximum."""
    return _minmax(self, dim, keepdim, other, True)


def min(self, dim=None, keepdim=False, *, other=None):  # noqa: A001
    """min() of all elements; min(dim) -> (values, indices); min(other) -> minimum."""
    return _minmax(self, dim, keepdim, other, False)


def _correction(unbiased, correction):
    if correction is not None:
        return int(correction)
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over dim (int or tuple; all dims if None); unbiased by default."""
    if isinstance(dim, bool):  # var(unbiased) spelled positionally
        dim, unbiased = None, dim
    return _C._var(self, dim, _correction(unbiased, correction), keepdim)


def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _C.sqrt(var(self, dim, unbiased, keepdim, correction=correction))


Tensor.max = max
Tensor.min = min
Tensor.argmin = _argmin
Tensor.var = var
Tensor.std = std


# ---- more methods in PyTorch spelling

@_method
def clamp(self, min=None, max=None):  # noqa: A002
    return _C.clamp(self, min, max)


Tensor.clip = clamp
Tensor.clip_ = lambda self, min=None, max=None: self.clamp_(min, max)


@_method
def where(self, condition, other):
    return _C.where(condition, self, other)


@_method
def masked_fill(self, mask, value):
    return _C.where(mask, value, self)


@_method
def masked_fill_(self, mask, value):
    return self.copy_(_C.where(mask, value, self))


@_method
def pow_(self, exponent):
    return self.copy_(_C.pow(self, exponent))


@_method
def repeat(self, *sizes):
    """Tiles the tensor (expand + reshape; a copy)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) < self.ndim:
        raise ValueError("repeat: the number of repeats can not be smaller than the tensor's dims")
    x = self.reshape((1,) * (len(sizes) - self.ndim) + tuple(self.shape))
    expanded, final = [], []
    for r, s in zip(sizes, x.shape):
        expanded += [r, s]
        final.append(r * s)
    inter = []
    for s in x.shape:
        inter += [1, s]
    return x.reshape(inter).expand(expanded).reshape(final)


@_method
def unflatten(self, dim, sizes):
    dim = dim + self.ndim if dim < 0 else dim
    shape = list(self.shape)
    return self.reshape(shape[:dim] + list(sizes) + shape[dim + 1:])


@_method
def movedim(self, source, destination):
    order = [d for d in range(self.ndim) if d != source % self.ndim]
    order.insert(destination % self.ndim, source % self.ndim)
    return self.permute(order)


def _band(self, diagonal, upper):
    if self.ndim < 2:
        raise _C.KilnValueError(f"[{'triu' if upper else 'tril'}] expects a tensor with at "
                                f"least 2 dims, got {self.ndim}")
    rows, cols = self.shape[-2], self.shape[-1]
    r = _C.arange(rows, device=self.device).unsqueeze(1)
    c = _C.arange(cols, device=self.device).unsqueeze(0)
    keep = (c - r >= diagonal) if upper else (c - r <= diagonal)
    return _C.where(keep, self, _C.zeros((), dtype=self.dtype, device=self.device))


@_method
def triu(self, diagonal=0):
    """The upper triangle (elements with col - row >= diagonal); the rest zeroed."""
    return _band(self, diagonal, True)


@_method
def tril(self, diagonal=0):
    """The lower triangle (elements with col - row <= diagonal); the rest zeroed."""
    return _band(self, diagonal, False)


@_method
def softmax_(self, dim):
    return self.copy_(_C.softmax(self, dim))


def _new_factory(name):
    def method(self, *args, dtype=None, device=None, **kwargs):
        dtype = self.dtype if dtype is None else dtype
        device = self.device if device is None else device
        return getattr(_C, name)(*args, dtype=dtype, device=device, **kwargs)

    method.__name__ = "new_" + name
    return method


for _name in ("zeros", "ones", "empty"):
    setattr(Tensor, "new_" + _name, _new_factory(_name))


@_method
def new_full(self, size, fill_value, dtype=None, device=None):
    return _C.full(size, fill_value, self.dtype if dtype is None else dtype,
                   self.device if device is None else device)


@_method
def new_tensor(self, data, dtype=None, device=None):
    from ._functions import tensor

    return tensor(data, dtype=self.dtype if dtype is None else dtype,
                  device=self.device if device is None else device)


# bool masks: & | ^ ~ (bool tensors only, as logical ops)
def _require_bool(name, *ts):
    for t in ts:
        if isinstance(t, Tensor) and t.dtype != _C.bool:
            raise _C.DTypeError(f"[{name}] kiln supports {name} on bool tensors only, got {t.dtype}")


def _and(a, b):
    _require_bool("and", a, b)
    return _C.mul(a, b) if isinstance(b, Tensor) else (a if b else _C.mul(a, False))


def _or(a, b):
    _require_bool("or", a, b)
    return _C.maximum(a, b) if isinstance(b, Tensor) else (_C.maximum(a, True) if b else a)


def _xor(a, b):
    _require_bool("xor", a, b)
    return _C.ne(a, b)


def _invert(a):
    _require_bool("invert", a)
    return _C.eq(a, False)


Tensor.__and__ = Tensor.__rand__ = _and
Tensor.__or__ = Tensor.__ror__ = _or
Tensor.__xor__ = Tensor.__rxor__ = _xor
Tensor.__invert__ = _invert
Tensor.logical_not = _invert
_matmul = _C.matmul


def matmul(input, other):
    """input @ other; inside an autocast region both sides in its dtype."""
    if _autocast._active[0]:
        input, other = _autocast.lower(input, other)
    return _matmul(input, other)


Tensor.__matmul__ = Tensor.matmul = matmul
Tensor.__rmatmul__ = lambda self, other: matmul(other, self)

# In-place forms of the pointwise unary ops of the op table (x.exp_(), x.sigmoid_(), ...)
for _name, _family in _C._op_table():
    if _family == "unary" and hasattr(Tensor, _name) and not hasattr(Tensor, _name + "_"):
        def _inplace(self, _op=getattr(_C, _name)):
            return self.copy_(_op(self))

        _inplace.__name__ = _name + "_"
        setattr(Tensor, _name + "_", _inplace)


def _deepcopy(self, memo):
    """copy.deepcopy(t): a new tensor with t's values, requires_grad and Python
    attributes (so deepcopy of a Module copies its Parameters as Parameters)."""
    if id(self) in memo:
        return memo[id(self)]
    from ._functions import no_grad

    with no_grad():
        result = self.detach().clone()
    if self.requires_grad:
        result.requires_grad_(True)
    memo[id(self)] = result
    for key, value in self.__dict__.items():
        setattr(result, key, value)
    return result


Tensor.__deepcopy__ = _deepcopy
Tensor.__copy__ = lambda self: self  # copy.copy shares, as for other Python objects


@_method
def pin_memory(self, device=None):
    """kiln has no pinned host memory: the tensor itself (copies to a GPU are staged by
    the runtime)."""
    return self


@_method
def is_pinned(self, device=None):
    return False
