"""Known footguns of capture-and-replay JITs, each asserting that kiln gets it right
(after tinygrad's test_jit_footguns.py): silent wrong answers rank above errors."""

import numpy as np
import pytest

import kiln


@pytest.fixture(autouse=True)
def fresh_tracer():
    kiln.reset()
    kiln.set_tracing(True)
    yield
    kiln.reset()


def t(a):
    return kiln.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def test_python_scalars_are_not_frozen(rng):
    f = kiln.compile(lambda x, s: x * s + s)
    x = t(rng.standard_normal(8))
    for s in (1.0, 2.0, 3.0, -4.5, 0.25):
        np.testing.assert_allclose(f(x, s).numpy(), x.numpy() * np.float32(s) + np.float32(s), rtol=1e-6)


def test_python_branches_are_not_frozen(rng):
    def body(x, flag):
        return kiln.exp(x) * 2.0 if flag else kiln.sin(x) * 2.0

    f = kiln.compile(body)
    x = t(rng.standard_normal(8))
    for flag in (True, True, True, False, True, False, False):
        expect = np.exp(x.numpy()) * 2 if flag else np.sin(x.numpy()) * 2
        np.testing.assert_allclose(f(x, flag).numpy(), expect, rtol=1e-6)


def test_inputs_mutated_between_calls_are_read_fresh(rng):
    f = kiln.compile(lambda x: kiln.tanh(x) + x)
    x = t(rng.standard_normal(8))
    for _ in range(5):
        np.testing.assert_allclose(f(x).numpy(), np.tanh(x.numpy()) + x.numpy(), rtol=1e-6)
        x.add_(0.5)  # in place, outside the compiled function


def test_writes_through_numpy_views_are_seen(rng):
    f = kiln.compile(lambda x: x * 3.0 + 1.0)
    x = t(rng.standard_normal(6))
    view = x.numpy()  # shares memory
    for i in range(5):
        view[:] = i
        np.testing.assert_allclose(f(x).numpy(), np.full(6, 3.0 * i + 1.0), rtol=1e-6)


def test_outputs_are_not_reused_buffers(rng):
    f = kiln.compile(lambda x, s: kiln.relu(x) * s)
    x = t(rng.standard_normal(16))
    outs = [f(x, float(i)) for i in range(6)]
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o.numpy(), np.maximum(x.numpy(), 0) * i, rtol=1e-6)


def test_returning_an_input_returns_that_tensor(rng):
    f = kiln.compile(lambda x, y: (x, x + y))
    x, y = t(rng.standard_normal(4)), t(rng.standard_normal(4))
    for _ in range(4):
        same, total = f(x, y)
        assert same is x or np.shares_memory(same.numpy(), x.numpy())
        np.testing.assert_allclose(total.numpy(), x.numpy() + y.numpy(), rtol=1e-6)


def test_item_while_recording_gives_the_current_value(rng):
    x = t(rng.standard_normal(10))
    for i in range(5):
        s = (x * float(i)).sum().item()
        assert s == pytest.approx(float(x.numpy().astype(np.float64).sum() * i), rel=1e-5, abs=1e-5)


def test_different_shapes_never_use_a_stale_plan(rng):
    f = kiln.compile(lambda x: (x * 2.0).sum(-1))
    for n in (4, 4, 4, 5, 4, 6, 6, 6, 4):
        x = t(rng.standard_normal((3, n)))
        # float32 sums in another order than numpy's: a few ulps of the terms, not of
        # a sum that cancels to near 0.
        np.testing.assert_allclose(f(x).numpy(), (x.numpy() * 2).sum(-1), rtol=1e-5,
                                   atol=1e-5 * n)
