"""autocast: mixed precision regions with PyTorch's spelling and CPU behaviour.

    with kiln.autocast("cpu", dtype=kiln.bfloat16):   # or kiln.amp.autocast / kiln.cpu.amp
        loss = model(x)                                 # linear / matmul / conv2d in bf16

Inside, linear, matmul and conv2d take their floating inputs in the autocast dtype and
the losses take float32 (kiln/_autocast.py lists the ops); the casts are ordinary kiln
ops, so autograd runs back through them. As PyTorch 1.13, CPU autocast supports
bfloat16 only: another dtype warns and disables autocast (float32 is then exactly a
no-op); CUDA autocast defaults to float16.
"""

import functools
import warnings

from .. import _autocast
from .. import _kiln as _C


class autocast:
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type not in ("cpu", "cuda"):
            raise RuntimeError(f"autocast: device_type must be 'cpu' or 'cuda', got "
                               f"{device_type!r}")
        if dtype is None:
            dtype = _C.bfloat16 if device_type == "cpu" else _C.float16
        if not isinstance(dtype, _C.dtype):
            raise TypeError(f"autocast: dtype must be a kiln dtype, got {type(dtype).__name__}")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        if self._enabled and device_type == "cpu" and dtype != _C.bfloat16:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nCPU Autocast only supports dtype of torch.bfloat16 "
                          "currently.")
            self._enabled = False
        if self._enabled and device_type == "cuda" and dtype not in (_C.float16, _C.bfloat16):
            warnings.warn("In CUDA autocast, but the target dtype is not supported. "
                          "Disabling autocast.")
            self._enabled = False
        self._previous = []

    def __enter__(self):
        self._previous.append(_autocast.set(self.device,
                                            self.fast_dtype if self._enabled else None))
        return self

    def __exit__(self, *exc):
        _autocast.set(self.device, self._previous.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled):
                return fn(*args, **kwargs)

        return wrapper


def is_autocast_enabled(device_type="cuda"):
    return _autocast.get(device_type) is not None


def is_autocast_cpu_enabled():
    return is_autocast_enabled("cpu")


def get_autocast_dtype(device_type):
    d = _autocast.get(device_type)
    if d is not None:
        return d
    return _C.bfloat16 if device_type == "cpu" else _C.float16


class _DeviceAutocast(autocast):
    _device = "cpu"
    _default = None

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        super().__init__(self._device, self._default if dtype is None else dtype, enabled,
                         cache_enabled)


class cpu_autocast(_DeviceAutocast):
    """kiln.cpu.amp.autocast(enabled=True, dtype=kiln.bfloat16)."""

    _device = "cpu"
    _default = _C.bfloat16


class cuda_autocast(_DeviceAutocast):
    """kiln.cuda.amp.autocast(enabled=True, dtype=kiln.float16)."""

    _device = "cuda"
    _default = _C.float16
