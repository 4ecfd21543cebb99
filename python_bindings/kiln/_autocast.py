"""Autocast state (per thread) and the casts the autocast-aware functions apply.

Which ops autocast, as PyTorch 1.13 does on the CPU (bfloat16):
  lower precision (inputs cast to the autocast dtype): linear, matmul (and @), conv2d;
  float32 (floating inputs cast up): cross_entropy, nll_loss, mse_loss,
  binary_cross_entropy(_with_logits), l1_loss, smooth_l1_loss, kl_div;
  every other op runs in its inputs' dtype.
The same two lists apply on CUDA (float16 by default there).
kiln.amp.autocast is the user-facing context manager; this module only keeps the state.
"""

import threading

from . import _kiln as _C

_local = threading.local()
_active = [0]  # autocast regions entered anywhere: the fast path checks this first


def _dtypes():
    d = getattr(_local, "dtypes", None)
    if d is None:
        d = _local.dtypes = {}
    return d


def get(device_type):
    """The autocast dtype for device_type ('cpu' / 'cuda') on this thread, or None."""
    return _dtypes().get(device_type)


def set(device_type, dtype):  # noqa: A001
    """Sets (dtype) or clears (None) autocast for device_type; returns the previous."""
    table = _dtypes()
    previous = table.get(device_type)
    if dtype is None:
        table.pop(device_type, None)
    else:
        table[device_type] = dtype
    _active[0] += (dtype is not None) - (previous is not None)
    return previous


def _target(t):
    if not isinstance(t, _C.Tensor) or not t.dtype.is_floating_point or t.dtype == _C.float64:
        return None  # PyTorch's eligible tensors: floating, not double
    return _dtypes().get(t.device.type)


def lower(*tensors):
    """The tensors cast to the autocast dtype of their device (others unchanged)."""
    if not _active[0]:
        return tensors
    out = []
    for t in tensors:
        d = _target(t)
        out.append(t if d is None or t.dtype == d else t.to(d))
    return tuple(out)


def float32(*tensors):
    """Floating tensors on an autocast device cast to float32 (others unchanged)."""
    if not _active[0]:
        return tensors
    out = []
    for t in tensors:
        d = _target(t)
        out.append(t if d is None or t.dtype == _C.float32 else t.to(_C.float32))
    return tuple(out)
