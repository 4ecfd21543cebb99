"""Symbolic bounds (tracer/symbolic_shapes.h, issue 21 item 1): a slice's start and end
and a select's index that move between walks are index symbols of one trace, not a new
trace per position. Footguns of a generation loop: a KV cache written at a moving
position and read up to it, `x[:, -T:]` with a growing T, a window whose start moves,
and bounds that go out of range (the same error as eager, and the runtime goes on). Every
value is checked against eager kiln and a float64 numpy reference on fresh random inputs,
the compiled replays under KILN_VERIFY."""

import numpy as np
import pytest

import kiln


pytestmark = pytest.mark.usefixtures("fresh_tracer")


@pytest.fixture(autouse=True)
def symbolic_verified():
    """Symbolic sizes on (whatever KILN_SYMBOLIC_SHAPES says), every replay verified."""
    previous = kiln.set_config(symbolic_shapes=True, verify=True)
    yield
    kiln.set_config(**previous)


def t(a):
    return kiln.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def replays(report):
    return sum(tr["replays"] for tr in report.traces)


def symbolic_why(report):
    return " ".join(tr["symbolic"] for tr in report.traces)


def eager(run):
    kiln.set_tracing(False)
    try:
        return run()
    finally:
        kiln.set_tracing(True)


def kv_inputs(rng, batch=3, c=16):
    w = [rng.standard_normal((c, c)) * 0.3 for _ in range(3)]
    return w, rng.standard_normal((batch, 1, c))


def kv_loop(w, x0, steps, capacity):
    """A decoder step per token: the new key and value written into the caches at `pos`
    (`k[:, pos:pos + 1] = x @ wk`), attention over `k[:, :pos + 1]`, the output read on
    the host (each step's walk ends there)."""
    wq, wk, wv = (t(a) for a in w)
    batch, _, c = x0.shape
    k, v = kiln.zeros((batch, capacity, c)), kiln.zeros((batch, capacity, c))
    x, outs = t(x0), []
    for pos in range(steps):
        k[:, pos:pos + 1] = x @ wk
        v[:, pos:pos + 1] = x @ wv
        keys, values = k[:, :pos + 1], v[:, :pos + 1]
        att = kiln.softmax((x @ wq) @ keys.transpose(1, 2) * (1.0 / c ** 0.5), -1)
        x = kiln.tanh(att @ values)
        outs.append(x.numpy())
    return outs


def kv_reference(w, x0, steps):
    wq, wk, wv = w
    c = x0.shape[-1]
    x, ks, vs, outs = x0, [], [], []
    for _ in range(steps):
        ks.append(x @ wk)
        vs.append(x @ wv)
        keys, values = np.concatenate(ks, 1), np.concatenate(vs, 1)
        s = (x @ wq) @ keys.transpose(0, 2, 1) / np.sqrt(c)
        e = np.exp(s - s.max(-1, keepdims=True))
        x = np.tanh((e / e.sum(-1, keepdims=True)) @ values)
        outs.append(x)
    return outs


def test_kv_cache_written_at_a_moving_position_replays_one_trace(rng):
    w, x0 = kv_inputs(rng)
    steps = 40
    traced = kv_loop(w, x0, steps, steps)
    report = kiln.explain()
    assert len(report.recompiles) <= 2, str(report)
    # The first walks record (warmup, the 0/1 specialisation of pos + 1), then it replays.
    assert replays(report) >= steps - 6, str(report)
    why = symbolic_why(report)
    assert "i0 = start of op" in why and "slice dim 1" in why, str(report)
    expected = eager(lambda: kv_loop(w, x0, steps, steps))
    for i, (a, b, r) in enumerate(zip(traced, expected, kv_reference(w, x0, steps))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"step {i} vs eager")
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5, err_msg=f"step {i} vs numpy")


def test_the_last_T_columns_with_a_growing_T(rng):
    x = rng.standard_normal((4, 48))
    xt, outs = t(x), []
    for n in range(1, 40):
        h = kiln.tanh(xt * 2.0)
        outs.append((h[:, -n:] * 3.0).sum(-1).numpy())
    report = kiln.explain()
    assert len(report.recompiles) <= 2 and replays(report) >= 30, str(report)
    assert "i0 = start of op 2 (slice dim 1)" in symbolic_why(report), str(report)
    for n, out in zip(range(1, 40), outs):
        np.testing.assert_allclose(out, (np.tanh(x * 2.0)[:, -n:] * 3.0).sum(-1), rtol=1e-5,
                                   atol=1e-5, err_msg=f"T = {n}")


def test_the_last_3_columns_of_an_input_whose_width_grows(rng):
    # Python's indexing passes bounds normalized: `[:, -3:]` of n columns is n - 3 to n,
    # index symbols that move with the size symbol of the input's width.
    for n in range(4, 30):
        x = rng.standard_normal((3, n))
        out = (kiln.tanh(t(x) * 2.0)[:, -3:] + 1.0).numpy()
        np.testing.assert_allclose(out, np.tanh(x * 2.0)[:, -3:] + 1.0, rtol=1e-5, atol=1e-6)
    report = kiln.explain()
    assert len(report.recompiles) <= 2 and replays(report) >= 20, str(report)
    why = symbolic_why(report)
    assert "s0 = dim 1 of in0" in why and "i0 = start of op 2" in why, str(report)


def test_a_window_and_an_index_whose_start_grows(rng):
    x, w = rng.standard_normal((5, 64)), rng.standard_normal((6, 5))
    xt, wt, outs = t(x), t(w), []
    for s in range(40):
        h = xt + 1.0
        window = h[:, s:s + 6]  # the same extent, a moving offset
        outs.append((wt @ window + h[:, s + 3] @ window).numpy())
    report = kiln.explain()
    assert len(report.recompiles) <= 2 and replays(report) >= 35, str(report)
    why = symbolic_why(report)
    assert "start of op" in why and "index of op" in why, str(report)
    for s, out in enumerate(outs):
        h = x + 1.0
        hw = h[:, s:s + 6]
        np.testing.assert_allclose(out, w @ hw + h[:, s + 3] @ hw, rtol=1e-5, atol=1e-5)


def run_or_error(f):
    try:
        return f(), None
    except Exception as e:  # noqa: BLE001 (the error itself is what is compared)
        return None, e


def test_bounds_out_of_range_raise_as_in_eager_and_the_runtime_goes_on(rng):
    x = rng.standard_normal((3, 20))
    xt = t(x)

    def step(s):
        return ((xt * 2.0)[:, s] + 1.0).numpy()

    # Compiled with a symbolic index, then an index past the end: eager's IndexError.
    for s in list(range(10)) + [25, 3, -21, 4, 5]:
        got, error = run_or_error(lambda: step(s))
        want, want_error = eager(lambda: run_or_error(lambda: step(s)))
        if want_error is not None:
            assert type(error) is type(want_error) and str(error) == str(want_error), (s, error)
            assert "out of bounds" in str(error) or "out of range" in str(error)
        else:
            assert error is None, (s, error)
            np.testing.assert_allclose(got, x[:, s] * 2.0 + 1.0, rtol=1e-5, atol=1e-6)
    report = kiln.explain()
    assert replays(report) >= 8 and len(report.recompiles) <= 2, str(report)


def test_a_kv_cache_written_past_its_end_does_what_eager_does(rng):
    """Past the cache's end, `k[:, pos:pos + 1]` is clamped to an empty view (the write
    broadcasts into nothing) and `k[:, :pos + 1]` stays the whole cache: no error, in
    eager kiln as in numpy and PyTorch. The traced loop must give the same values, not a
    plan of the last position that fit."""
    w, x0 = kv_inputs(rng, batch=2, c=8)
    capacity, steps = 12, 18
    traced, traced_error = run_or_error(lambda: kv_loop(w, x0, steps, capacity))
    expected, eager_error = eager(lambda: run_or_error(lambda: kv_loop(w, x0, steps, capacity)))
    assert type(traced_error) is type(eager_error) and str(traced_error) == str(eager_error)
    assert replays(kiln.explain()) > 0, str(kiln.explain())
    for i, (a, b) in enumerate(zip(traced, expected)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
    # The runtime is still usable: the loop again within the cache, right values.
    outs = kv_loop(w, x0, capacity, capacity)
    for i, (a, r) in enumerate(zip(outs, kv_reference(w, x0, capacity))):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5, err_msg=f"step {i}")


def test_bounds_that_moved_together_split_when_they_part(rng):
    """Two windows at one start are one index symbol (a relation); from step 8 on the
    second runs one ahead: the guard names the relation that broke, one recompile splits
    the symbol, and the values stay right."""
    x = rng.standard_normal((4, 64))
    xt, outs = t(x), []
    offsets = [(s, s) for s in range(8)] + [(s, s + 1) for s in range(8, 30)]
    for a, b in offsets:
        h = xt * 2.0
        outs.append((h[:, a:a + 5] - h[:, b:b + 5]).numpy())
    report = kiln.explain()
    assert len(report.recompiles) == 1, str(report)
    assert "slice's start is i0" in report.recompiles[0]["guard"], str(report)
    assert "i2 = start of op 2" in symbolic_why(report), str(report)
    assert replays(report) >= 20, str(report)  # the split variant's, from step 9 on
    for (a, b), out in zip(offsets, outs):
        h = x * 2.0
        np.testing.assert_allclose(out, h[:, a:a + 5] - h[:, b:b + 5], rtol=1e-6, atol=1e-6)


def test_kv_cache_compiled_in_the_background_replays_once_installed(rng):
    kiln.set_config(background_compile=True)
    w, x0 = kv_inputs(rng)
    wq, wk, wv = (t(a) for a in w)
    batch, _, c = x0.shape
    k, v = kiln.zeros((batch, 32, c)), kiln.zeros((batch, 32, c))
    x, outs = t(x0), []
    for pos in range(32):
        if pos == 6:
            kiln.synchronize_compiles()  # installed when the next walk begins
        k[:, pos:pos + 1] = x @ wk
        v[:, pos:pos + 1] = x @ wv
        att = kiln.softmax((x @ wq) @ k[:, :pos + 1].transpose(1, 2) * (1.0 / c ** 0.5), -1)
        x = kiln.tanh(att @ v[:, :pos + 1])
        outs.append(x.numpy())
    report = kiln.explain()
    assert len(report.recompiles) == 0 and replays(report) >= 25, str(report)
    for i, (a, r) in enumerate(zip(outs, kv_reference(w, x0, 32))):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5, err_msg=f"step {i}")


@pytest.mark.parametrize("bounds", [False, True], ids=["sizes", "sizes_and_bounds"])
def test_a_skipped_call_never_launches_another_sizes_plan(rng, bounds):
    """compile(fn, skip=True) launches the plan of a verified call without running fn. A
    symbolic trace's plan is its binding to that call's sizes and bounds: a call at other
    sizes (whose guards a symbolic trace passes as relations) runs fn. Launching the
    symbolic executable instead gave the first size's answer (shape [3, 6] for [3, 9])."""
    k = rng.standard_normal((3, 40))
    kt_ = t(k)

    def f(x):
        y = x * 2.0
        return y + kt_[:, :x.shape[1]] if bounds else kiln.tanh(y)

    g = kiln.compile(f, skip=True)
    for n in (5, 6, 7, 8, 9, 9, 9, 9, 10, 9, 8, 14, 6, 6):
        x = rng.standard_normal((3, n))
        want = x * 2.0 + k[:, :n] if bounds else np.tanh(x * 2.0)
        np.testing.assert_allclose(g(t(x)).numpy(), want, rtol=1e-5, atol=1e-6, err_msg=f"{n}")
    assert any(tr["symbolic"] for tr in kiln.explain().traces), str(kiln.explain())


def test_narrow_at_a_moving_start_and_past_the_end(rng):
    # narrow(dim, start, length) is a slice whose start moves; past the end it raises
    # eager's IndexError (checked before the op), and the loop goes on replaying.
    x = rng.standard_normal((3, 24))
    xt = t(x)

    def step(s):
        return (kiln.exp(xt * 0.5).narrow(1, s, 4) * 3.0).numpy()

    for s in list(range(12)) + [21, 5, 22, 6, 7, 8]:
        got, error = run_or_error(lambda: step(s))
        want, want_error = eager(lambda: run_or_error(lambda: step(s)))
        assert type(error) is type(want_error) and str(error) == str(want_error), (s, error)
        if s + 4 > 24:
            assert isinstance(error, IndexError) and "[narrow] start" in str(error), error
        else:
            np.testing.assert_allclose(got, np.exp(x * 0.5)[:, s:s + 4] * 3.0, rtol=1e-5,
                                       atol=1e-6)
    report = kiln.explain()
    assert replays(report) >= 10 and len(report.recompiles) <= 2, str(report)
    assert "start of op 2 (slice dim 1)" in symbolic_why(report), str(report)
