"""tensor_split / hsplit / vsplit / dsplit, fliplr / flipud, addbmm / addmv,
randint_like and get_rng_state / set_rng_state against torch 1.13 on fresh random
inputs (values and gradients), with PyTorch's error types."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch
TOL = dict(rtol=1e-12, atol=1e-12)


def grads_match(rng, shape, fk, ft, n_in=1, shapes=None):
    shapes = shapes or [shape] * n_in
    arrays = [rng.standard_normal(s) for s in shapes]
    ks = [k(a).requires_grad_(True) for a in arrays]
    ts = [t(a).requires_grad_(True) for a in arrays]
    yk, yt = fk(*ks), ft(*ts)
    yk = yk if isinstance(yk, tuple) else (yk,)
    yt = yt if isinstance(yt, tuple) else (yt,)
    assert len(yk) == len(yt)
    total_k, total_t = 0, 0
    for a, b in zip(yk, yt):
        assert_close(a, b.detach(), **TOL)
        if b.numel():
            w = rng.standard_normal(tuple(b.shape))
            total_k = total_k + (a * k(w)).sum()
            total_t = total_t + (b * t(w)).sum()
    total_k.backward()
    total_t.backward()
    for a, b in zip(ks, ts):
        assert_close(a.grad, b.grad, **TOL)


@pytest.mark.parametrize("spec,dim", [(3, 0), (4, 1), ([1, 4], 1), ([2, -2, 9], 0),
                                      ((0, 0, 3), -1), (7, 1)])
def test_tensor_split(rng, spec, dim):
    grads_match(rng, (5, 6), lambda x: kiln.tensor_split(x, spec, dim),
                lambda x: torch.tensor_split(x, spec, dim))
    grads_match(rng, (5, 6), lambda x: x.tensor_split(spec, dim=dim),
                lambda x: x.tensor_split(spec, dim=dim))


@pytest.mark.parametrize("name,shape,spec", [
    ("hsplit", (4, 6), 3), ("hsplit", (6,), [2, 5]), ("vsplit", (4, 6), 2),
    ("vsplit", (4, 6), [1]), ("dsplit", (2, 3, 4), 2)])
def test_h_v_d_split(rng, name, shape, spec):
    grads_match(rng, shape, lambda x: getattr(kiln, name)(x, spec),
                lambda x: getattr(torch, name)(x, spec))


@pytest.mark.parametrize("name", ["fliplr", "flipud"])
def test_flips(rng, name):
    grads_match(rng, (3, 4, 2), getattr(kiln, name), getattr(torch, name))
    grads_match(rng, (3, 4), lambda x: getattr(x, name)(), lambda x: getattr(x, name)())


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, -2.0)])
def test_addbmm_addmv(rng, beta, alpha):
    grads_match(rng, None, lambda i, a, b: kiln.addbmm(i, a, b, beta=beta, alpha=alpha),
                lambda i, a, b: torch.addbmm(i, a, b, beta=beta, alpha=alpha),
                shapes=[(3, 5), (4, 3, 2), (4, 2, 5)])
    grads_match(rng, None, lambda i, m, v: kiln.addmv(i, m, v, beta=beta, alpha=alpha),
                lambda i, m, v: torch.addmv(i, m, v, beta=beta, alpha=alpha),
                shapes=[(3,), (3, 4), (4,)])


def test_randint_like_and_rng_state():
    x = kiln.zeros(3, 4, dtype=kiln.int32)
    r = kiln.randint_like(x, 5, 9)
    assert r.shape == (3, 4) and r.dtype == kiln.int32
    v = r.numpy()
    assert v.min() >= 5 and v.max() < 9
    assert kiln.randint_like(kiln.zeros(2, 2), 3).dtype == kiln.float32
    state = kiln.get_rng_state()
    a = kiln.rand(5).numpy()
    b = kiln.randn(3).numpy()
    kiln.set_rng_state(state)
    np.testing.assert_array_equal(kiln.rand(5).numpy(), a)
    np.testing.assert_array_equal(kiln.randn(3).numpy(), b)
    assert not np.array_equal(kiln.rand(5).numpy(), a)


@pytest.mark.parametrize("build", [
    lambda lib: lib.tensor_split(lib.zeros(4), 0),
    lambda lib: lib.tensor_split(lib.zeros(4), 2, dim=3),
    lambda lib: lib.hsplit(lib.zeros(4, 5), 2),
    lambda lib: lib.vsplit(lib.zeros(4), 2),
    lambda lib: lib.fliplr(lib.zeros(4)),
    lambda lib: lib.addmv(lib.zeros(2), lib.zeros(2, 2), lib.zeros(2, 2)),
    lambda lib: lib.tensor_split(lib.zeros(4), 2.5),
])
def test_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch)
    with pytest.raises(type(et.value)):
        build(kiln)
