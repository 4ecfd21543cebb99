"""Everyday functions composed of kiln ops (kiln/_composites.py, kiln.linalg) against
torch 1.13 on fresh random inputs: values (exact where PyTorch's are: predicates,
rounding incl. ties and huge values, integer // and %) and gradients, as functions and
as Tensor methods; the in-place random fills by their statistics."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

TOL = dict(rtol=1e-10, atol=1e-12)


def grad_check(rng, name, shapes, *args, method=False, tol=TOL, **kwargs):
    arrays = [rng.standard_normal(s) for s in shapes]
    ks = [k(a).requires_grad_(True) for a in arrays]
    ts = [t(a).requires_grad_(True) for a in arrays]
    if method:
        yk = getattr(ks[0], name)(*ks[1:], *args, **kwargs)
        yt = getattr(ts[0], name)(*ts[1:], *args, **kwargs)
    else:
        yk = getattr(kiln, name)(*ks, *args, **kwargs)
        yt = getattr(torch, name)(*ts, *args, **kwargs)
    assert_close(yk, yt.detach(), **tol)
    w = rng.standard_normal(tuple(yt.shape))
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()
    for a, b in zip(ks, ts):
        assert_close(a.grad, b.grad, **tol)


SPECIAL = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.0, -0.0, 3.7, -3.7, 1e17, -1e17,
                    np.inf, -np.inf, np.nan, 2.0 ** 52 + 1, 0.49999999999999994, -7.0])


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "frac", "sign",
                                  "isnan", "isinf", "isfinite", "square", "log1p", "expm1",
                                  "log2", "log10", "exp2", "logical_not", "nan_to_num"])
def test_pointwise_exact_and_special_values(rng, name):
    x = np.concatenate([SPECIAL, rng.standard_normal(30) * 10])
    if name in ("log1p", "log2", "log10"):
        x = np.abs(x)
    yk = getattr(kiln, name)(k(x))
    yt = getattr(torch, name)(t(x))
    tol = dict(rtol=0, atol=0) if name not in ("log1p", "expm1", "log2", "log10", "exp2") \
        else dict(rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(yk.numpy().astype(np.float64), yt.numpy().astype(np.float64),
                               equal_nan=True, **tol)
    assert getattr(k(x), name)().dtype == yk.dtype  # the method too


def test_round_decimals_and_float32():
    x = np.array([1.2345, -2.5555, 0.125, 1e10], dtype=np.float32)
    for d in (0, 1, 2):
        assert_close(kiln.round(k(x), decimals=d), torch.round(t(x), decimals=d))


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_floor_divide_and_remainder(rng, dtype):
    a = rng.integers(-20, 20, 40).astype(dtype)
    b = rng.choice([-7, -3, -1, 2, 5], 40).astype(dtype)
    for op, fn in (("__floordiv__", torch.floor_divide), ("__mod__", torch.remainder)):
        yk = getattr(k(a), op)(k(b))
        yt = fn(t(a), t(b))
        assert_close(yk, yt, rtol=0, atol=0)
        assert_close(getattr(k(a), op)(3), fn(t(a), 3), rtol=0, atol=0)
    assert_close(kiln.fmod(k(a), k(b)), torch.fmod(t(a), t(b)), rtol=0, atol=0)
    assert_close(7 // k(b), 7 // t(b), rtol=0, atol=0)


@pytest.mark.parametrize("case", [
    ("lerp", [(3, 4), (3, 4)], (0.3,)), ("addcmul", [(3, 4), (3, 4), (4,)], ()),
    ("addcdiv", [(3, 4), (3, 4), (3, 4)], ()), ("outer", [(3,), (5,)], ()),
    ("dot", [(6,), (6,)], ()), ("mv", [(3, 4), (4,)], ()), ("mm", [(3, 4), (4, 2)], ()),
    ("bmm", [(2, 3, 4), (2, 4, 5)], ()), ("addmm", [(3, 2), (3, 4), (4, 2)], ()),
    ("baddbmm", [(2, 3, 5), (2, 3, 4), (2, 4, 5)], ()), ("logsumexp", [(3, 4, 5)], (1,)),
    ("logsumexp", [(3, 4)], ((0, 1),)), ("flip", [(3, 4, 5)], ((0, 2),)),
    ("roll", [(3, 4)], (1, 0)), ("roll", [(3, 4)], ((2, -1), (0, 1))), ("roll", [(5,)], (2,)),
    ("repeat_interleave", [(3, 2)], (2,), {"dim": 0}), ("repeat_interleave", [(4,)], (3,)),
    ("tile", [(2, 3)], ((2, 1, 2),)), ("diag", [(4,)], ()), ("diag", [(4,)], (2,)),
    ("diag", [(3,)], (-1,)), ("diag", [(3, 5)], (1,)), ("diag", [(4, 3)], (-2,)),
    ("norm", [(3, 4)], ()), ("norm", [(3, 4)], (1, 1)), ("norm", [(3, 4)], (3.0, 0, True)),
])
def test_differentiable_composites_match_torch(rng, case):
    name, shapes, args, *kw = case
    grad_check(rng, name, shapes, *args, **(kw[0] if kw else {}))


def test_methods_and_kwargs(rng):
    grad_check(rng, "lerp", [(3, 4), (3, 4)], 0.7, method=True)
    grad_check(rng, "addcmul", [(3, 4), (3, 4), (3, 4)], method=True, value=0.5)
    grad_check(rng, "addmm", [(3, 2), (3, 4), (4, 2)], beta=0.5, alpha=2.0)
    grad_check(rng, "flip", [(3, 4)], 0, 1, method=True)
    x = rng.standard_normal((2, 3))
    assert_close(k(x).tile(2, 2), t(x).tile(2, 2))
    assert [tuple(u.shape) for u in k(x).unbind(1)] == [(2,)] * 3
    assert_close(kiln.unbind(k(x))[1], t(x)[1])


@pytest.mark.parametrize("ord_", [2, 1, 3.5, float("inf"), float("-inf"), 0])
def test_linalg_vector_norm(rng, ord_):
    x = rng.standard_normal((3, 4, 5))
    for dim, keepdim in ((None, False), (1, True), ((0, 2), False)):
        assert_close(kiln.linalg.vector_norm(k(x), ord_, dim, keepdim),
                     torch.linalg.vector_norm(t(x), ord_, dim, keepdim), **TOL)
    if ord_ not in (0,):
        grad_check(rng, "norm", [(3, 4)], ord_, 1)
    assert_close(kiln.linalg.norm(k(x)), torch.linalg.norm(t(x)), **TOL)
    assert_close(kiln.linalg.matrix_norm(k(x)), torch.linalg.matrix_norm(t(x)), **TOL)


def test_predicates_and_reductions(rng):
    x = rng.standard_normal((4, 5))
    x[x < -1.0] = 0.0
    for name in ("any", "all", "count_nonzero"):
        assert_close(getattr(kiln, name)(k(x)), getattr(torch, name)(t(x)))
        assert_close(getattr(kiln, name)(k(x), 1), getattr(torch, name)(t(x), 1))
    assert_close(kiln.all(k(x) > -5, 0, keepdim=True), torch.all(t(x) > -5, 0, keepdim=True))
    a, b = k(x) > 0, k(x) < 0.5
    for name in ("logical_and", "logical_or", "logical_xor"):
        assert_close(getattr(kiln, name)(a, b), getattr(torch, name)(t(x) > 0, t(x) < 0.5))
    assert kiln.allclose(k(x), k(x + 1e-9)) and not kiln.allclose(k(x), k(x + 1e-3))
    assert_close(kiln.isclose(k(x), k(x + 1e-6)), torch.isclose(t(x), t(x + 1e-6)))
    assert kiln.equal(k(x), k(x)) and not kiln.equal(k(x), k(x[:3]))
    for fn in ("var_mean", "std_mean"):
        for got, want in zip(getattr(kiln, fn)(k(x), 1), getattr(torch, fn)(t(x), 1)):
            assert_close(got, want, **TOL)


def test_eye_and_in_place_fills():
    assert_close(kiln.eye(3, 5), torch.eye(3, 5))
    assert kiln.eye(2, dtype=kiln.int64).dtype == kiln.int64
    a, b = kiln.zeros(4, 4), torch.zeros(4, 4)
    assert_close(a.fill_diagonal_(2.0), b.fill_diagonal_(2.0))
    a, b = kiln.zeros(7, 3), torch.zeros(7, 3)
    assert_close(a.fill_diagonal_(1.0, wrap=True), b.fill_diagonal_(1.0, wrap=True))
    a, b = kiln.ones(3, 4), torch.ones(3, 4)
    idx = [0, 2]
    assert_close(a.index_fill_(1, kiln.tensor(idx), -1.0),
                 b.index_fill_(1, torch.tensor(idx), -1.0))
    x = kiln.tensor([1.5, -2.5, 0.3])
    x.floor_()
    np.testing.assert_array_equal(x.numpy(), [1.0, -3.0, 0.0])


def test_random_fills_have_the_right_statistics():
    kiln.manual_seed(0)
    n = 200000
    v = kiln.empty(n).normal_(1.5, 2.0).numpy()
    assert abs(v.mean() - 1.5) < 0.02 and abs(v.std() - 2.0) < 0.02
    v = kiln.empty(n).uniform_(-3, 5).numpy()
    assert v.min() >= -3 and v.max() < 5 and abs(v.mean() - 1.0) < 0.03
    v = kiln.empty(n).bernoulli_(0.3).numpy()
    assert set(np.unique(v)) <= {0.0, 1.0} and abs(v.mean() - 0.3) < 0.01
    v = kiln.empty(n).exponential_(4.0).numpy()
    assert v.min() >= 0 and abs(v.mean() - 0.25) < 0.005
    v = kiln.empty(n, dtype=kiln.int64).random_(2, 9).numpy()
    assert v.min() == 2 and v.max() == 8
    p = kiln.full((n,), 0.8)
    assert abs(kiln.bernoulli(p).numpy().mean() - 0.8) < 0.01


@pytest.mark.parametrize("build", [
    lambda lib: lib.dot(lib.zeros(2, 2), lib.zeros(2, 2)),
    lambda lib: lib.mm(lib.zeros(2), lib.zeros(2, 2)),
    lambda lib: lib.roll(lib.zeros(2, 2), (1, 1), 0),
    lambda lib: lib.diag(lib.zeros(2, 2, 2)),
])
def test_errors_match_torch_types(build):
    with pytest.raises(Exception) as et:
        build(torch)
    with pytest.raises(et.type):
        build(kiln)
