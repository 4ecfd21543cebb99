"""The Tensor type's fast number slots (python_bindings/src/tensor_operators.cpp): + - *
/ @ give the values of PyTorch (the reference) for every operand mix, raise kiln's
error classes, and leave other operands to the bound methods (NotImplemented)."""

import operator

import numpy as np
import pytest

import kiln
from helpers import requires_torch, torch

pytestmark = requires_torch

OPS = [operator.add, operator.sub, operator.mul, operator.truediv]


def _pair(rng, shape_a, shape_b):
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32) + 3.0  # away from 0 for /
    return a, b


@pytest.mark.parametrize("op", OPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((1,), (2, 1))])
def test_tensor_tensor(rng, op, shapes):
    a, b = _pair(rng, *shapes)
    got = op(kiln.tensor(a), kiln.tensor(b))
    want = op(torch.tensor(a), torch.tensor(b))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("op", OPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("scalar", [2, -1.5, True, np.float32(0.25), np.int64(3)],
                         ids=lambda s: type(s).__name__)
def test_tensor_scalar_both_sides(rng, op, scalar):
    if isinstance(scalar, bool) and op is operator.sub:
        pytest.skip("PyTorch refuses - with a bool")
    a, _ = _pair(rng, (5,), (5,))
    a = a + 4.0  # nonzero for scalar / tensor
    for got, want in ((op(kiln.tensor(a), scalar), op(torch.tensor(a), scalar)),
                      (op(scalar, kiln.tensor(a)), op(scalar, torch.tensor(a)))):
        assert isinstance(got, kiln.Tensor)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_integer_tensors_keep_their_dtype(rng):
    a = rng.integers(-5, 5, (6,)).astype(np.int64)
    for op in (operator.add, operator.sub, operator.mul):
        got = op(kiln.tensor(a), 3)
        want = op(torch.tensor(a), 3)
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_matmul(rng):
    a, b = rng.standard_normal((3, 5)), rng.standard_normal((5, 2))
    got = kiln.tensor(a.astype(np.float32)) @ kiln.tensor(b.astype(np.float32))
    np.testing.assert_allclose(got.numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_errors_are_kiln_classes():
    with pytest.raises(kiln.ShapeError, match=r"\[add\].*broadcast"):
        kiln.ones(2) + kiln.ones(3)
    with pytest.raises(kiln.ShapeError):
        kiln.ones(2, 3) @ kiln.ones(2, 3)
    with pytest.raises(TypeError, match="unsupported operand"):
        kiln.ones(2) + "a"
    with pytest.raises(TypeError, match="unsupported operand"):
        None * kiln.ones(2)
    with pytest.raises(TypeError):
        kiln.ones(2) @ 2.0


def test_other_operands_take_the_bound_methods(rng):
    a = rng.standard_normal(4).astype(np.float32)
    got = kiln.tensor(a) + np.ones(4, dtype=np.float32)  # numpy decides, as before
    np.testing.assert_allclose(np.asarray(got), a + 1.0, rtol=1e-6)



def test_lazily_replayed_ops_match_eager_and_still_raise(rng):
    """Ops that replay lazily (dispatch hands them to the tracer before inferring their
    metadata) give eager's values and gradients; an operand off the compiled path's
    guards still raises the op's own error, and the loop replays again after it."""
    if not kiln.is_tracing():
        pytest.skip("the tracer is off (KILN_TRACE=0)")
    kiln.reset()
    a = rng.standard_normal(4).astype(np.float32)
    x, w = kiln.tensor(a), kiln.full((4,), 0.5, dtype=kiln.float32)

    def body(x, w):
        y = x + w
        y = y * x
        y = y - w
        return y * 2.0

    want = ((a + 0.5) * a - 0.5) * 2.0
    for _ in range(50):
        body(x, w)
    kiln.synchronize_compiles()
    before = kiln.explain().ops_replayed
    outs = [body(x, w) for _ in range(20)]
    assert kiln.explain().ops_replayed >= before + 4 * 10  # most of them replayed
    for out in outs:
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)

    with pytest.raises(kiln.ShapeError, match=r"\[add\].*broadcast"):
        body(x, kiln.ones(3))
    for _ in range(50):
        body(x, w)
    np.testing.assert_allclose(body(x, w).numpy(), want, rtol=1e-6)

    xg = kiln.tensor(a, requires_grad=True)
    for _ in range(30):
        xg.grad = None
        body(xg, w).sum().backward()
        np.testing.assert_allclose(xg.grad.numpy(), 2.0 * (2.0 * a + 0.5), rtol=1e-5)
