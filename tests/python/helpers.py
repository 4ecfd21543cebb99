"""Helpers shared by the tests (imported as `from helpers import ...`)."""

import os

import numpy as np
import pytest

import kiln

try:
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
except ImportError:  # the GPU machine's Python 3.11 has numpy only
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not importable here")
requires_cuda = pytest.mark.skipif(not kiln.cuda.is_available(), reason="no CUDA device")


def randn(rng, *shape, dtype=np.float32):
    """Standard normal values, never all zeros."""
    return rng.standard_normal(shape).astype(dtype)


def k(a, **kw):
    """numpy array -> kiln tensor (a copy)."""
    return kiln.tensor(np.asarray(a), **kw)


def t(a):
    """numpy array -> torch tensor (a copy)."""
    return torch.from_numpy(np.array(a, copy=True))


def to_np(x):
    """kiln or torch tensor -> numpy array (a copy on the host)."""
    if isinstance(x, kiln.Tensor):
        if x.dtype == kiln.bfloat16:
            x = x.float()
        return np.array(x.cpu().numpy(), copy=True)
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.detach().cpu().numpy().copy()
    return np.asarray(x)


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, check_dtype=True):
    """actual: kiln tensor; expected: torch tensor or numpy array. Shapes must match;
    dtypes must correspond (kiln.float32 <-> float32) when check_dtype."""
    a = to_np(actual)
    e = to_np(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    if check_dtype:
        ed = expected.dtype
        if torch is not None and isinstance(expected, torch.Tensor):
            assert str(actual.dtype).split(".")[-1] == str(ed).split(".")[-1], \
                f"dtype {actual.dtype} != expected {ed}"
        else:
            assert to_np(actual).dtype == e.dtype or actual.dtype == kiln.bfloat16, \
                f"dtype {actual.dtype} != expected {e.dtype}"
    if a.dtype == np.bool_ or e.dtype == np.bool_:
        np.testing.assert_array_equal(a, e)
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                   atol=atol)


DTYPE_PAIRS = [
    ("float32", np.float32),
    ("float64", np.float64),
    ("int32", np.int32),
    ("int64", np.int64),
    ("bool", np.bool_),
]
