"""Module-level functions that need Python-side argument handling: kiln.tensor,
from_numpy / from_dlpack (zero-copy), *_like factories, max/min/var/std in PyTorch
spelling, and small conveniences (no_grad, is_tensor, ...)."""

import functools

from . import _kiln as _C
from ._kiln import Tensor
from . import _tensor

__all__ = [
    "tensor", "as_tensor", "from_numpy", "from_dlpack", "to_dlpack",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
    "max", "min", "argmin", "var", "std", "clip", "concat", "concatenate",
    "is_tensor", "is_floating_point", "numel", "no_grad", "inference_mode",
    "set_grad_enabled", "enable_grad", "is_grad_enabled", "movedim", "masked_fill", "triu",
    "tril", "matmul",
]

_DEFAULT_FLOAT = _C.float32


# ---- kiln.tensor from Python data

def _is_numpy(obj):
    return type(obj).__module__ == "numpy"


def _flatten(data, shape, depth, flat):
    """Appends the leaves of nested lists to flat; checks the lists are not ragged."""
    if isinstance(data, (list, tuple)):
        n = len(data)
        if depth == len(shape):
            shape.append(n)
        elif shape[depth] != n:
            raise ValueError(f"expected sequence of length {shape[depth]} at dim {depth} "
                             f"(got {n})")
        for item in data:
            _flatten(item, shape, depth + 1, flat)
        return
    if depth != len(shape):
        raise ValueError(f"expected a sequence at dim {depth}, got {type(data).__name__}")
    if isinstance(data, Tensor):
        if data.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        data = data.item()
    elif _is_numpy(data):
        data = data.item()
    if not isinstance(data, (bool, int, float)):
        raise TypeError(f"kiln.tensor: can't convert {type(data).__name__} to a tensor element; "
                        "expected numbers or nested lists of numbers")
    flat.append(data)


def _infer_dtype(flat):
    kind = _C.bool
    for v in flat:
        if isinstance(v, bool):
            continue
        if isinstance(v, float):
            return _DEFAULT_FLOAT
        kind = _C.int64
    return kind


def _numpy_supported(arr):
    import numpy as np

    if arr.dtype == np.bool_ or arr.dtype in (np.float16, np.float32, np.float64,
                                              np.int32, np.int64):
        return arr
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        return arr.astype(np.float64)
    raise _C.DTypeError(f"[tensor] unsupported numpy dtype {arr.dtype}; kiln supports float16, "
                        "float32, float64, int32, int64 and bool")


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of data (nested lists, a number, a numpy array, a
    tensor, or anything with __dlpack__ / __array_interface__)."""
    result = _tensor_no_grad(data, dtype, device)
    if requires_grad:
        result.requires_grad_(True)
    return result


def _tensor_no_grad(data, dtype, device):
    if dtype is not None and not isinstance(dtype, _C.dtype) and dtype not in (float, int, bool):
        raise _C.DTypeError(f"[tensor] dtype must be a kiln dtype (kiln.float32, ...), "
                            f"got {type(dtype).__name__}")
    if isinstance(data, Tensor):
        result = data.clone()
    elif _is_numpy(data) or hasattr(data, "__array_interface__"):
        import numpy as np

        arr = _numpy_supported(np.asarray(data, order="C"))
        # copied at the call, not by a traced clone that may replay lazily and read the
        # array after the caller wrote it
        result = _C._host_copy(_C._from_array_interface(arr))
    elif hasattr(data, "__dlpack__"):
        result = _C._host_copy(from_dlpack(data))
    else:
        flat, shape = [], []
        _flatten(data, shape, 0, flat)
        if dtype is None:
            dtype = _infer_dtype(flat) if flat else _DEFAULT_FLOAT
        target = _C.device("cpu") if device is None else device
        return _C._tensor_from_flat(flat, tuple(shape), dtype, target)
    return result.to(dtype=dtype, device=device)


def as_tensor(data, dtype=None, device=None):
    """Like tensor(), but shares memory with tensors and numpy arrays when it can."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device)
    if _is_numpy(data) and type(data).__name__ == "ndarray":
        try:
            return from_numpy(data).to(dtype=dtype, device=device)
        except (TypeError, ValueError):
            pass
    return tensor(data, dtype=dtype, device=device)


def from_numpy(ndarray):
    """A CPU tensor sharing memory with a numpy array (writes show through both ways;
    the array stays alive while any view of the tensor does)."""
    if not _is_numpy(ndarray) or type(ndarray).__name__ != "ndarray":
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    return _C._from_array_interface(ndarray)


def from_dlpack(ext_tensor):
    """A tensor sharing memory with any DLPack producer (torch, numpy, CuPy, JAX, ...)
    or with a "dltensor" capsule. CUDA data: the producer is asked to order its work
    before kiln's stream (the stream argument of __dlpack__)."""
    if hasattr(ext_tensor, "__dlpack__"):
        dev_type, dev_id = ext_tensor.__dlpack_device__()
        dev_type = int(dev_type)
        if dev_type == 2:  # kDLCUDA
            stream = _C._cuda_stream_handle(int(dev_id))
            capsule = ext_tensor.__dlpack__(stream=stream if stream else 1)
        else:
            capsule = ext_tensor.__dlpack__(stream=None)
    else:
        capsule = ext_tensor
    return _C._from_dlpack_capsule(capsule)


def to_dlpack(t):
    """A "dltensor" capsule for t (legacy spelling; prefer passing t itself)."""
    return _C._to_dlpack(t)


# ---- *_like factories

def _like(name):
    def fn(input, dtype=None, device=None, **kwargs):
        return getattr(_C, name)(tuple(input.shape),
                                 dtype=input.dtype if dtype is None else dtype,
                                 device=input.device if device is None else device, **kwargs)

    fn.__name__ = name + "_like"
    fn.__doc__ = f"kiln.{name} with input's shape (and, unless given, dtype and device)."
    return fn


zeros_like = _like("zeros")
ones_like = _like("ones")
empty_like = _like("empty")
rand_like = _like("rand")
randn_like = _like("randn")


def full_like(input, fill_value, dtype=None, device=None):
    return _C.full(tuple(input.shape), fill_value, input.dtype if dtype is None else dtype,
                   input.device if device is None else device)


# ---- reductions in PyTorch spelling

def max(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    """max(x); max(x, dim, keepdim=False) -> (values, indices); max(x, other)."""
    return _tensor.max(input, dim, keepdim, other=other)


def min(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    """min(x); min(x, dim, keepdim=False) -> (values, indices); min(x, other)."""
    return _tensor.min(input, dim, keepdim, other=other)


def argmin(input, dim=None, keepdim=False):
    return input.argmin(dim, keepdim)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _tensor.var(input, dim, unbiased, keepdim, correction=correction)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return _tensor.std(input, dim, unbiased, keepdim, correction=correction)


matmul = _tensor.matmul
clip = _C.clamp
concat = _C.cat
concatenate = _C.cat


def movedim(input, source, destination):
    return input.movedim(source, destination)


def triu(input, diagonal=0):
    return input.triu(diagonal)


def tril(input, diagonal=0):
    return input.tril(diagonal)


def masked_fill(input, mask, value):
    return _C.where(mask, value, input)


def is_tensor(obj):
    return isinstance(obj, Tensor)


def is_floating_point(input):
    return input.dtype.is_floating_point


def numel(input):
    return input.numel()


# ---- grad mode (kiln.no_grad() etc.; kiln.autograd has the rest)

class _GradMode:
    """A context manager / function decorator that sets grad mode while entered and
    restores the previous mode on exit."""

    def __init__(self, mode):
        self.prev = _C.is_grad_enabled()
        self.mode = bool(mode)

    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        _C.set_grad_enabled_(self.mode)
        return self

    def __exit__(self, *exc):
        _C.set_grad_enabled_(self.prev)
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(mode):
                return fn(*args, **kwargs)

        return wrapper


class set_grad_enabled(_GradMode):
    """Like torch.set_grad_enabled: a call sets the mode at once; as a context manager it
    restores the previous mode on exit; as a decorator it only wraps."""

    def __init__(self, mode=True):
        super().__init__(mode)
        _C.set_grad_enabled_(self.mode)

    def __enter__(self):  # self.prev is the mode before the call
        _C.set_grad_enabled_(self.mode)
        return self

    def __call__(self, fn):
        _C.set_grad_enabled_(self.prev)
        return super().__call__(fn)


class no_grad(_GradMode):
    """No history is recorded inside (optimizer updates, evaluation)."""

    def __init__(self):
        super().__init__(False)


class enable_grad(_GradMode):
    """History is recorded inside, even within no_grad."""

    def __init__(self):
        super().__init__(True)


class inference_mode(_GradMode):
    """inference_mode(mode=True): like no_grad when mode is True (kiln has no separate
    inference tensors); inference_mode(False) leaves grad mode as it is. Usable bare as
    a decorator too (@kiln.inference_mode)."""

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):
            return cls(True)(mode)
        return super().__new__(cls)

    def __init__(self, mode=True):
        super().__init__(False)
        self.enabled = bool(mode)

    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        if self.enabled:
            _C.set_grad_enabled_(False)
        return self

    def __call__(self, fn):
        enabled = self.enabled

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(enabled):
                return fn(*args, **kwargs)

        return wrapper
is_grad_enabled = _C.is_grad_enabled
