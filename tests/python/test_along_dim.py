"""The ops along one dim (gather, scatter, scatter_add, index_add, sort, argsort, topk,
cumsum, cumprod, prod) against torch 1.13 on fresh random inputs: values, indices,
gradients through torch.autograd, the Tensor methods and in-place forms, bad input with
PyTorch's error types, and a traced loop equal to eager."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

TOL = dict(rtol=1e-10, atol=1e-12)


def leaves(*arrays):
    ks = [k(a).requires_grad_(True) for a in arrays]
    ts = [t(a).requires_grad_(True) for a in arrays]
    return ks, ts


def backward_both(rng, yk, yt):
    w = rng.standard_normal(tuple(yt.shape))
    (yk * k(w)).sum().backward()
    (yt * t(w)).sum().backward()


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_values_and_grad(rng, dim):
    x = rng.standard_normal((4, 5, 3))
    shape = [3, 4, 2]
    shape[dim] = 7
    index = rng.integers(0, x.shape[dim], size=shape)
    (xk,), (xt,) = leaves(x)
    yk, yt = kiln.gather(xk, dim, k(index)), torch.gather(xt, dim, t(index))
    assert_close(yk, yt.detach(), **TOL)
    backward_both(rng, yk, yt)
    assert_close(xk.grad, xt.grad, **TOL)
    assert_close(xk.gather(dim, k(index)), yt.detach(), **TOL)


def test_scatter_src_value_and_grads(rng):
    x, src = rng.standard_normal((4, 5)), rng.standard_normal((3, 5))
    index = np.stack([rng.permutation(4)[:3] for _ in range(5)], axis=1)  # no repeats per column
    (xk, sk), (xt, st) = leaves(x, src)
    yk, yt = kiln.scatter(xk, 0, k(index), sk), torch.scatter(xt, 0, t(index), st)
    assert_close(yk, yt.detach(), **TOL)
    backward_both(rng, yk, yt)
    assert_close(xk.grad, xt.grad, **TOL)
    assert_close(sk.grad, st.grad, **TOL)
    assert_close(kiln.scatter(k(x), 0, k(index), value=2.5),
                 torch.scatter(t(x), 0, t(index), value=2.5), **TOL)
    assert_close(k(x).scatter(0, k(index), 1.5), t(x).scatter(0, t(index), 1.5), **TOL)
    xi = k(x)
    xi.scatter_(0, k(index), sk.detach())
    assert_close(xi, t(x).scatter_(0, t(index), st.detach()), **TOL)


def test_scatter_add_and_index_add_with_repeats(rng):
    x, src = rng.standard_normal((4, 5)), rng.standard_normal((6, 5))
    index = rng.integers(0, 4, size=(6, 5))
    (xk, sk), (xt, st) = leaves(x, src)
    yk, yt = kiln.scatter_add(xk, 0, k(index), sk), torch.scatter_add(xt, 0, t(index), st)
    assert_close(yk, yt.detach(), **TOL)
    backward_both(rng, yk, yt)
    assert_close(xk.grad, xt.grad, **TOL)
    assert_close(sk.grad, st.grad, **TOL)

    rows = rng.integers(0, 4, size=6)
    (xk, sk), (xt, st) = leaves(x, src)
    yk = kiln.index_add(xk, 0, k(rows), sk, alpha=-2)
    yt = torch.index_add(xt, 0, t(rows), st, alpha=-2)
    assert_close(yk, yt.detach(), **TOL)
    backward_both(rng, yk, yt)
    assert_close(xk.grad, xt.grad, **TOL)
    assert_close(sk.grad, st.grad, **TOL)
    xi = k(x).float()
    xi.index_add_(0, k(rows), k(src).float())
    assert_close(xi, t(x).float().index_add_(0, t(rows), t(src).float()), rtol=1e-6, atol=1e-6)
    ints = rng.integers(-5, 5, size=(4, 5))
    assert_close(k(ints).scatter_add(1, k(index[:4]), k(ints)),
                 t(ints).scatter_add(1, t(index[:4]), t(ints)))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort_stable_with_ties_and_nan(rng, descending):
    x = rng.integers(-3, 3, size=(4, 9)).astype(np.float32)
    x[1, 2] = x[2, 7] = np.nan
    x[3, 0] = np.inf
    rk = kiln.sort(k(x), dim=1, descending=descending, stable=True)
    rt = torch.sort(t(x), dim=1, descending=descending, stable=True)
    assert_close(rk.values, rt.values)
    assert_close(rk.indices, rt.indices)
    values, indices = k(x).sort(1, descending)
    assert_close(indices, rt.indices)
    assert_close(kiln.argsort(k(x), 1, descending, stable=True), rt.indices)
    ints = rng.integers(-100, 100, size=(3, 4, 5))
    assert_close(kiln.sort(k(ints), 0, stable=True).indices,
                 torch.sort(t(ints), stable=True, dim=0).indices)


def test_sort_and_topk_values_are_differentiable(rng):
    x = rng.standard_normal((5, 6))
    (xk,), (xt,) = leaves(x)
    yk = kiln.sort(xk, 0, descending=True).values * 2 + kiln.topk(xk, 3, dim=0).values.sum(0)
    yt = torch.sort(xt, 0, descending=True).values * 2 + torch.topk(xt, 3, dim=0).values.sum(0)
    assert_close(yk, yt.detach(), **TOL)
    backward_both(rng, yk, yt)
    assert_close(xk.grad, xt.grad, **TOL)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_and_indices(rng, largest):
    x = rng.standard_normal((3, 50)).astype(np.float32)  # no ties
    rk = kiln.topk(k(x), 5, largest=largest)
    rt = torch.topk(t(x), 5, largest=largest)
    assert_close(rk.values, rt.values)
    assert_close(rk.indices, rt.indices)
    values, indices = k(x).topk(2, dim=0, largest=largest, sorted=True)
    assert_close(indices, torch.topk(t(x), 2, dim=0, largest=largest).indices)
    xn = x.copy()
    xn[0, 7] = np.nan
    assert int(kiln.topk(k(xn), 1).indices[0, 0].item()) == 7  # NaN is the largest


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_scans_values_and_grads(rng, name):
    x = rng.uniform(0.5, 1.5, size=(3, 4, 5)) * rng.choice([-1, 1], size=(3, 4, 5))
    for dim in (0, 1, -1):
        (xk,), (xt,) = leaves(x)
        yk, yt = getattr(kiln, name)(xk, dim), getattr(torch, name)(xt, dim)
        assert_close(yk, yt.detach(), **TOL)
        backward_both(rng, yk, yt)
        assert_close(xk.grad, xt.grad, rtol=1e-9, atol=1e-10)
    ints = rng.integers(-3, 4, size=(4, 5)).astype(np.int32)
    assert_close(getattr(k(ints), name)(1), getattr(t(ints), name)(1))  # int32 -> int64
    assert_close(getattr(kiln, name)(k(ints), 0, dtype=kiln.float64),
                 getattr(torch, name)(t(ints), 0, dtype=torch.float64))
    xf = k(x.astype(np.float32))
    getattr(xf, name + "_")(1)
    assert_close(xf, getattr(torch, name)(t(x.astype(np.float32)), 1), rtol=1e-5, atol=1e-6)


def test_prod_values_and_grads_with_zeros(rng):
    x = rng.standard_normal((3, 4, 5))
    x[0, 1, 2] = 0.0  # one zero in a line
    x[1, 2, 0] = x[1, 2, 3] = 0.0  # two zeros in a line
    for dim, keepdim in ((2, False), (1, True), (-3, False)):
        (xk,), (xt,) = leaves(x)
        yk, yt = kiln.prod(xk, dim, keepdim), torch.prod(xt, dim, keepdim)
        assert_close(yk, yt.detach(), **TOL)
        backward_both(rng, yk, yt)
        assert_close(xk.grad, xt.grad, **TOL)
    (xk,), (xt,) = leaves(rng.standard_normal((2, 3)))
    yk, yt = xk.prod(), xt.prod()
    assert_close(yk, yt.detach(), **TOL)
    yk.backward()
    yt.backward()
    assert_close(xk.grad, xt.grad, **TOL)
    ints = rng.integers(-3, 4, size=(4, 5)).astype(np.int32)
    assert_close(kiln.prod(k(ints), 1), torch.prod(t(ints), 1))
    assert_close(kiln.prod(k(ints), dtype=kiln.float32), torch.prod(t(ints), dtype=torch.float32))


@pytest.mark.parametrize("call, error", [
    (lambda m, x, i: m.gather(x, 0, i + 7), (IndexError, RuntimeError)),
    (lambda m, x, i: m.gather(x, 2, i), IndexError),
    (lambda m, x, i: m.scatter(x, 0, i - 1, x), (IndexError, RuntimeError)),
    (lambda m, x, i: m.scatter_add(x, 0, i, x.int()), (TypeError, RuntimeError)),
    (lambda m, x, i: m.index_add(x, 0, i[0], x), (IndexError, ValueError, RuntimeError)),
    (lambda m, x, i: m.topk(x, 5, dim=0), RuntimeError),
    (lambda m, x, i: m.sort(x, dim=3), IndexError),
    (lambda m, x, i: m.cumsum(x, 2), IndexError),
    (lambda m, x, i: m.prod(x, -3), IndexError),
])
def test_bad_input_raises_pytorchs_error_type(call, error):
    x = np.arange(6.0).reshape(3, 2)
    i = np.zeros((3, 2), dtype=np.int64)
    with pytest.raises(error):
        call(torch, t(x), t(i))
    with pytest.raises(error) as info:
        call(kiln, k(x), k(i))
    assert str(info.value).startswith("[")  # names the op


def test_index_errors_name_op_and_index():
    with pytest.raises(IndexError, match=r"\[gather\] index 9 is out of range for dim 0"):
        kiln.gather(kiln.zeros(3, 2), 0, kiln.tensor([[9, 0]]))


def test_traced_loop_equals_eager(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    index = rng.integers(0, 4, size=(4, 3))

    def step(a):
        idx = k(index)
        s = kiln.scatter_add(a, 1, idx, kiln.gather(a, 1, idx) * 2)
        top = s.topk(2, dim=1)
        c = kiln.cumsum(s, 0) + kiln.prod(a, 1, keepdim=True) + a.cumprod(1)
        return kiln.cat([top.values, c.sort(1).values, top.indices.float(),
                         a.index_add(0, idx[:, 0], a)], 1)

    expected = step(k(x)).numpy()
    kiln.reset()
    for _ in range(6):  # past the warmup: recorded, compiled and replayed
        with kiln.region("along_dim_loop", warmup=2):
            got = step(k(x))
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)
    traces = kiln.explain().traces
    assert traces and traces[0]["replays"] >= 3, str(kiln.explain())
    assert "topk" in traces[0]["ops"] and "scatter_add" in traces[0]["ops"]
