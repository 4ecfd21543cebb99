"""Max pooling on the CPU against PyTorch CPU: the forward kernel's paths (the 2x2
stride-2 window, windows inside the row, clipped edge windows) and max_pool2d_backward,
the one-pass gradient the autograd rule runs on the CPU (ops/cpu/pool2d.cpp): random
geometries, ties (ReLU'd zeros), NaN and -inf, 16-bit inputs, strided gradients, and
inside a compiled trace (a library step of the LLVM plan)."""

import numpy as np
import pytest

import kiln
import kiln.nn.functional as KF
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

if torch is not None:
    import torch.nn.functional as TF

CASES = [  # (x shape, kernel, stride, padding)
    ((2, 3, 8, 8), 2, 2, 0),  # the 2x2 stride-2 path
    ((2, 3, 9, 7), 2, 2, 0),  # odd sizes: the last row and column dropped
    ((2, 3, 7, 9), 3, 2, 1),  # clipped edge windows
    ((1, 2, 6, 6), (2, 3), (1, 2), (1, 0)),
    ((3, 5, 5), 2, 1, 0),  # overlapping windows: gradients add up
    ((2, 4, 13, 17), (3, 2), (2, 3), (1, 1)),
    ((1, 1, 5, 40), (1, 4), (1, 4), (0, 2)),
]


def _grads(x, upstream, kernel, stride, padding, dtype):
    kx = k(x).to(getattr(kiln, dtype)).requires_grad_()
    ky = KF.max_pool2d(kx, kernel, stride, padding)
    ky.backward(k(upstream).to(getattr(kiln, dtype)))
    tx = t(x).to(getattr(torch, dtype)).requires_grad_()
    ty = TF.max_pool2d(tx, kernel, stride, padding)
    ty.backward(t(upstream).to(getattr(torch, dtype)))
    return ky, kx.grad, ty, tx.grad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_and_gradient_match_torch(rng, case, dtype):
    xs, kernel, stride, padding = case
    x = np.maximum(rng.standard_normal(xs), 0.0)  # ReLU'd: windows of tied zeros
    out_shape = tuple(TF.max_pool2d(t(x), kernel, stride, padding).shape)
    upstream = rng.standard_normal(out_shape)
    ky, kg, ty, tg = _grads(x, upstream, kernel, stride, padding, dtype)
    assert_close(ky, ty.detach(), rtol=0, atol=0)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == "float64" else dict(rtol=1e-6, atol=1e-6)
    assert_close(kg, tg, **tol)


def test_nan_and_infinity(rng):
    x = rng.standard_normal((2, 2, 6, 6))
    x[0, 0, 1, 1] = np.nan  # a NaN inside a window of the 2x2 path
    x[0, 1, 2:4, 2:4] = -np.inf  # a window of -inf only: its first element takes the grad
    x[1, 0, 0, 0] = np.inf
    x[1, 1, 4, 5] = np.nan
    upstream = rng.standard_normal((2, 2, 3, 3))
    ky, kg, ty, tg = _grads(x, upstream, 2, 2, 0, "float64")
    assert_close(ky, ty.detach(), rtol=0, atol=0)
    assert_close(kg, tg, rtol=0, atol=0)
    # the general path (padding) with a NaN
    upstream = rng.standard_normal((2, 2, 3, 3))
    ky, kg, ty, tg = _grads(x, upstream, 3, 2, 1, "float64")
    assert_close(ky, ty.detach(), rtol=0, atol=0)
    assert_close(kg, tg, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit(rng, dtype):
    # torch's CPU max_pool2d has no float16: the reference is float32 on the same
    # (rounded) values, where ties and maxima are the same.
    x = k(np.maximum(rng.standard_normal((2, 3, 8, 6)), 0.0)).to(getattr(kiln, dtype))
    upstream = k(rng.standard_normal((2, 3, 4, 3))).to(getattr(kiln, dtype))
    kx = x.detach().requires_grad_()
    ky = KF.max_pool2d(kx, 3, 2, 1)
    ky.backward(upstream)
    assert kx.grad.dtype == getattr(kiln, dtype)
    tx = t(x.to(kiln.float32)).requires_grad_()
    ty = TF.max_pool2d(tx, 3, 2, 1)
    ty.backward(t(upstream.to(kiln.float32)))
    assert_close(ky.to(kiln.float32), ty.detach(), rtol=0, atol=0)
    assert_close(kx.grad.to(kiln.float32), tg_rounded(tx.grad, dtype), rtol=0, atol=0)


def tg_rounded(grad, dtype):
    """torch's float32 gradient rounded once to dtype, as kiln's (summed in float)."""
    return grad.to(getattr(torch, dtype)).float()


def test_strided_gradient_and_3d_input(rng):
    x = rng.standard_normal((3, 8, 8))
    kx, tx = k(x).requires_grad_(), t(x).requires_grad_()
    # sum's gradient is an expanded (0-stride) tensor; the transpose a permuted one
    KF.max_pool2d(kx, 2).transpose(1, 2).sum().backward()
    TF.max_pool2d(tx, 2).transpose(1, 2).sum().backward()
    assert_close(kx.grad, tx.grad, rtol=0, atol=0)


def test_in_a_compiled_trace(rng):
    """A training-like loop: the traced replays (the pool and its gradient as library
    steps of the compiled plan) give torch's gradients at every step."""
    kiln.reset()
    was = kiln.is_tracing()
    previous = kiln.set_config(warmup=1, background_compile=False)
    kiln.set_tracing(True)
    try:
        for step in range(5):
            x = np.maximum(rng.standard_normal((4, 3, 10, 10)), 0.0).astype(np.float32)
            kx = k(x).requires_grad_()
            (KF.max_pool2d(kiln.relu(kx) * 2.0, 2) ** 2).sum().backward()
            tx = t(x).requires_grad_()
            (TF.max_pool2d(torch.relu(tx) * 2.0, 2) ** 2).sum().backward()
            assert_close(kx.grad, tx.grad, rtol=1e-6, atol=1e-6)
        assert kiln.explain().ops_replayed > 0
    finally:
        kiln.set_tracing(was)
        kiln.set_config(**previous)
        kiln.reset()



def test_the_raw_op_and_its_errors(rng):
    x = rng.standard_normal((2, 3, 7, 9))
    g = rng.standard_normal((2, 3, 4, 5))
    _, _, ty, tg = _grads(x, g, 3, 2, 1, "float64")
    assert_close(kiln.max_pool2d_backward(k(g), k(x), 3, 2, 1), tg, rtol=0, atol=0)
    with pytest.raises(kiln.ShapeError, match=r"\[max_pool2d_backward\] expected grad of shape"):
        kiln.max_pool2d_backward(kiln.zeros((2, 3, 3, 5), dtype=kiln.float64), k(x), 3, 2, 1)
    with pytest.raises(kiln.KilnValueError,
                       match=r"\[max_pool2d_backward\] expected grad and input"):
        kiln.max_pool2d_backward(k(g).to(kiln.float32), k(x), 3, 2, 1)
