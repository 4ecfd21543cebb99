"""Symbolic sizes (tracer/symbolic_shapes.h, issue 21): a trace whose guards fail only on
a size compiles once with that dim symbolic and replays at every other size; dims that
moved together are one symbol (a relation between inputs), sizes 0 and 1 stay
specialised, strides that do not follow the sizes stay exact. Every value is checked
against a float64 numpy reference, most under KILN_VERIFY."""

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("fresh_tracer")


@pytest.fixture(autouse=True)
def symbolic_on():
    """Symbolic sizes on, whatever KILN_SYMBOLIC_SHAPES says (the default is on)."""
    previous = kiln.set_config(symbolic_shapes=True)
    yield
    kiln.set_config(**previous)


def t(a):
    return kiln.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def mlp_params(rng, d_in=16, hidden=32, d_out=8):
    return [rng.standard_normal(s).astype(np.float32) * 0.3
            for s in ((d_in, hidden), (hidden,), (hidden, d_out), (d_out,))]


def mlp(x, w1, b1, w2, b2):
    return kiln.relu(x @ w1 + b1) @ w2 + b2


def mlp_ref(x, w1, b1, w2, b2):
    f = [np.asarray(a, dtype=np.float64) for a in (x, w1, b1, w2, b2)]
    return np.maximum(f[0] @ f[1] + f[2], 0) @ f[3] + f[4]


def replays(report):
    return sum(tr["replays"] for tr in report.traces)


@pytest.mark.parametrize("mode", ["compile", "loop"])
def test_batch_sizes_1_to_64_in_random_order_replay_with_at_most_2_recompiles(rng, mode):
    kiln.set_config(verify=True)
    params = mlp_params(rng)
    w = [t(p) for p in params]
    f = kiln.compile(mlp) if mode == "compile" else mlp
    for n in rng.permutation(np.arange(1, 65)):
        x = rng.standard_normal((int(n), 16)).astype(np.float32)
        out = f(t(x), *w).numpy()  # the host read ends the loop's walk
        np.testing.assert_allclose(out, mlp_ref(x, *params), rtol=1e-4, atol=1e-4)
    report = kiln.explain()
    assert len(report.recompiles) <= 2, str(report)
    # Two recordings before the first compile, one more for a size-1 specialisation.
    assert replays(report) >= 61, str(report)
    symbolic = [tr for tr in report.traces if tr["symbolic"]]
    assert symbolic and "dim 0 of in0" in symbolic[0]["symbolic"], str(report)
    assert symbolic[0]["size_bindings"] >= 50, str(report)
    assert "symbolic sizes: s0 = dim 0 of in0" in str(report)


def test_dims_that_moved_together_are_one_symbol_and_split_when_they_part(rng):
    def f(x, y):
        return (x * 2.0).sum(0) + (y - 1.0).sum(0)

    def ref(x, y):
        return (x.astype(np.float64) * 2).sum(0) + (y.astype(np.float64) - 1).sum(0)

    g = kiln.compile(f)
    # (One loop: the caller's line is part of a trace's site.) From (4, 6) on the
    # relation no longer holds: a guard fails, a variant with two symbols compiles.
    for i, (a, b) in enumerate(((3, 3), (5, 5), (7, 7), (4, 6), (9, 2), (2, 9), (6, 6))):
        x, y = rng.standard_normal((a, 4)), rng.standard_normal((b, 4))
        np.testing.assert_allclose(g(t(x), t(y)).numpy(), ref(x, y), rtol=1e-5, atol=1e-5)
        if i == 2:
            report = kiln.explain()
            assert len(report.recompiles) == 0, str(report)
            assert "s0 = dim 0 of in0 = dim 0 of in1" in report.traces[0]["symbolic"], str(report)
    report = kiln.explain()
    assert len(report.recompiles) == 1, str(report)
    assert "dim 0 is s0, 4 earlier in this walk, got 6" in report.recompiles[0]["guard"]
    # The variant with two symbols took the place of the one it generalizes.
    assert len(report.traces) == 1 and "s1 = dim 0 of in1" in report.traces[0]["symbolic"]
    assert report.traces[0]["replays"] == 3, str(report)


def test_size_one_is_a_specialisation_with_broadcasting_kept(rng):
    kiln.set_config(verify=True)

    def f(x, y):
        return kiln.exp(x + y) * 0.5

    g = kiln.compile(f)
    y = rng.standard_normal((1, 6))
    # (One loop: the caller's line is part of a trace's site.) From 6 on, x of one row:
    # the guard asks for a symbolic size >= 2; one specialisation, then it replays; the
    # symbolic trace still serves the other sizes.
    for i, n in enumerate((4, 5, 6, 7, 1, 1, 1, 8, 1, 3)):
        x = rng.standard_normal((n, 6))
        np.testing.assert_allclose(g(t(x), t(y)).numpy(), np.exp(x + y) * 0.5, rtol=1e-5)
        if i == 3:
            assert len(kiln.explain().recompiles) == 0
    report = kiln.explain()
    assert len(report.recompiles) == 1, str(report)
    assert "expected a size >= 2" in report.recompiles[0]["guard"], str(report)
    assert replays(report) >= 7, str(report)


def test_outputs_of_other_sizes_are_never_overwritten(rng):
    g = kiln.compile(lambda x: kiln.tanh(x * 3.0) + 1.0)
    held = []
    for n in (5, 6, 7, 5, 8, 6, 5):
        x = rng.standard_normal((n, 3))
        held.append((x, g(t(x))))
    for x, y in held:
        np.testing.assert_allclose(y.numpy(), np.tanh(x * 3.0) + 1.0, rtol=1e-5, atol=1e-6)


def test_strides_that_do_not_follow_the_sizes_stay_exact(rng):
    # A transposed input: its stride changes with the size but is not contiguous, so the
    # trace is never made symbolic in it; every answer is still right.
    g = kiln.compile(lambda x: (x * 2.0).sum(-1))
    for n in (4, 5, 4, 5, 6, 6):
        base = rng.standard_normal((6, n))
        x = t(base).t()
        np.testing.assert_allclose(g(x).numpy(), (base.T * 2.0).sum(-1), rtol=1e-5, atol=1e-5)
    assert not any(tr["symbolic"] for tr in kiln.explain().traces)


def test_reduction_over_a_symbolic_dim(rng):
    kiln.set_config(verify=True)

    def f(x):
        m = x.mean(-1, keepdim=True)
        return kiln.softmax(x - m, -1) * 2.0

    g = kiln.compile(f)
    for n in (9, 17, 3, 33, 2, 64, 17):
        x = rng.standard_normal((4, n))
        y = x - x.mean(-1, keepdims=True)
        e = np.exp(y - y.max(-1, keepdims=True))
        np.testing.assert_allclose(g(t(x)).numpy(), e / e.sum(-1, keepdims=True) * 2.0,
                                   rtol=1e-5, atol=1e-6)
    report = kiln.explain()
    assert len(report.recompiles) == 0 and report.traces[0]["symbolic"], str(report)


def test_switched_off_every_size_is_its_own_variant(rng):
    kiln.set_config(symbolic_shapes=False)
    try:
        g = kiln.compile(lambda x: kiln.exp(x) + 1.0)
        for n in (3, 3, 3, 5, 5, 5):
            x = rng.standard_normal(n)
            np.testing.assert_allclose(g(t(x)).numpy(), np.exp(x) + 1.0, rtol=1e-5)
        report = kiln.explain()
        assert len(report.recompiles) == 1 and not any(tr["symbolic"] for tr in report.traces)
    finally:
        kiln.set_config(symbolic_shapes=True)


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "exact"])
@pytest.mark.parametrize("source", ["numpy", "torch"])
def test_tensor_copies_its_data_at_the_call_while_a_walk_replays(rng, symbolic, source):
    """kiln.tensor(array) is a copy made at the call: writing the array afterwards, before
    the walk ends, changes neither the tensor nor what was computed from it. A traced
    clone of the wrapped array replayed lazily and read the array at the boundary, after
    the write: with symbolic sizes a loop over arrays of different sizes (load_state_dict,
    the compat suite's first losses) replays too."""
    from helpers import torch

    if source == "torch" and torch is None:
        pytest.skip("PyTorch is not importable here")
    kiln.set_config(symbolic_shapes=symbolic)
    for i in range(8):
        n = 3 + i if symbolic else 5
        a = rng.standard_normal((n, 4)).astype(np.float32)
        want = a.astype(np.float64)
        k = kiln.tensor(torch.from_numpy(a) if source == "torch" else a)
        u = k * 2.0 + 1.0
        a[:] = -7.0  # the caller reuses its buffer (torch.from_numpy shares it)
        np.testing.assert_allclose(k.numpy(), want, rtol=1e-6, err_msg=f"iteration {i}")
        np.testing.assert_allclose(u.numpy(), want * 2 + 1, rtol=1e-6, atol=1e-6,
                                   err_msg=f"iteration {i}")
    assert replays(kiln.explain()) > 0, str(kiln.explain())
