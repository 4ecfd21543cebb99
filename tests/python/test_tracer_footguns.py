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



def attention_adamw_steps(traced, weights, x, target, steps):
    """AdamW inside the step of an attention whose keys have a bias: softmax ignores a
    shift shared by all keys, so that bias's gradient is exactly 0 and what arrives is
    rounding noise (about 1e-9), which Adam normalizes into lr-sized updates. Eager and
    the fused kernels round differently, so the two update it differently; both are as
    close to the float64 result."""
    params = [kiln.tensor(w, requires_grad=True) for w in weights]
    opt = kiln.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    xs, ys = t(x), t(target)
    kiln.set_tracing(traced)
    losses = []
    try:
        for _ in range(steps):
            wq, wk, wv, key_bias = params
            q, k, v = xs @ wq, xs @ wk + key_bias, xs @ wv
            att = kiln.nn.functional.softmax((q @ k.transpose(-2, -1)) * 0.25, dim=-1)
            loss = ((att @ v - ys) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        kiln.set_tracing(True)
    return np.array(losses), [p.detach().numpy().copy() for p in params]


def test_optimizer_step_in_a_trace_passes_verify(rng):
    steps, lr = 8, 1e-2
    weights = [(rng.standard_normal((16, 16)) * 0.3).astype(np.float32) for _ in range(3)]
    weights.append((rng.standard_normal(16) * 0.1).astype(np.float32))
    x = rng.standard_normal((4, 16, 16)).astype(np.float32)
    target = rng.standard_normal((4, 16, 16)).astype(np.float32)
    eager_losses, eager_params = attention_adamw_steps(False, weights, x, target, steps)
    previous = kiln.set_config(verify=True)  # every replay also runs eagerly and must agree
    try:
        kiln.reset()
        traced_losses, traced_params = attention_adamw_steps(True, weights, x, target, steps)
        replays = sum(tr["replays"] for tr in kiln.explain().traces)
    finally:
        kiln.set_config(**previous)
    assert replays >= 5  # the step ran compiled, under verify, several times
    np.testing.assert_allclose(traced_losses, eager_losses, rtol=1e-4, atol=1e-6)
    for traced, eager in zip(traced_params[:3], eager_params[:3]):
        np.testing.assert_allclose(traced, eager, rtol=1e-3, atol=1e-5)
    # The key bias moves by weight decay and rounding noise only: at most lr a step.
    assert np.abs(traced_params[3] - weights[3]).max() <= steps * lr * 1.01
