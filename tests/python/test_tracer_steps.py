"""Training steps as real programs write them (issue 17, bench/models): what used to cut a
step into several traces or make it record again every step. Each case asserts one trace
a step (two where the step is longer than the maximum trace length), no compile and no
recorded op after warmup, and the same values as the program run eagerly (tracing off);
the module runs again under KILN_VERIFY."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

from test_tracer_sites import delta, t


@pytest.fixture(autouse=True, params=[False, True], ids=["plain", "verify"])
def fresh_tracer(request):
    kiln.reset()
    kiln.set_tracing(True)
    previous = kiln.set_config(verify=request.param)
    yield
    kiln.set_config(**previous)
    kiln.set_tracing(True)
    kiln.reset()


def run(traced, steps, step_fn):
    """step_fn(step) -> a host value; explain() snapshots 6 steps before the end and at it."""
    kiln.reset()
    kiln.set_tracing(traced)
    values, snaps = [], []
    try:
        for step in range(steps):
            if step == steps - 6:
                snaps.append(kiln.explain())
            values.append(step_fn(step))
        snaps.append(kiln.explain())
    finally:
        kiln.set_tracing(True)
    return np.array(values), snaps


def assert_steady(before, after, traces=1):
    d = delta(before, after)
    assert d["compiles"] == 0 and d["recompiles"] == 0 and d["recorded"] == 0, (d, str(after))
    assert 1 <= len(d["replaying"]) <= traces, (d, str(after))


def test_stack_of_new_tensors_is_not_a_loop(rng):
    # stack issues one unsqueeze per input from one Python call: the same op at the same
    # site on a new external input each time, which looked like a loop coming round.
    arrays = [rng.standard_normal(8).astype(np.float32) for _ in range(5)]
    w = t(rng.standard_normal(8))

    def step(_):
        scale = kiln.exp(w)  # an op before the stack: the step's head
        parts = [kiln.from_numpy(a.copy()) for a in arrays]  # new tensors every step
        return (kiln.tanh(kiln.stack(parts) * scale) * 2.0).sum().item()

    eager, _ = run(False, 12, step)
    traced, (before, after) = run(True, 12, step)
    np.testing.assert_allclose(traced, eager, rtol=1e-5)
    assert_steady(before, after)
    assert after.recompiles == [] and len(after.traces) == 1, str(after)
    assert after.traces[0]["ops"][:7] == ["exp"] + ["unsqueeze"] * 5 + ["cat"], str(after)


def accumulation_step(micro):
    """An embedding model trained with gradient accumulation over `micro` micro-steps, each
    starting with a factory (a position arange, the loop's head) and drawing its batch
    with stack + from_numpy; AdamW, zero_grad, loss.item() once per step."""
    kiln.manual_seed(7)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, 32, 4096).astype(np.int64)
    starts = rng.integers(0, 4000, (64, 4))
    emb, head = nn.Embedding(32, 16), nn.Linear(16, 32)
    opt = kiln.optim.AdamW(list(emb.parameters()) + list(head.parameters()), lr=1e-2)
    draws = iter(range(10 ** 6))

    def step(_):
        for _ in range(micro):
            rows = starts[next(draws) % len(starts)]
            x = kiln.stack([kiln.from_numpy(tokens[s:s + 8]) for s in rows])
            y = kiln.stack([kiln.from_numpy(tokens[s + 1:s + 9]) for s in rows])
            pos = kiln.arange(0, 8, dtype=kiln.int64)
            h = kiln.relu(emb(x) + emb(pos))
            loss = F.cross_entropy(head(h).view(-1, 32), y.view(-1)) / micro
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


@pytest.mark.parametrize("micro", [2, 3])
def test_gradient_accumulation_loop_is_one_trace_per_step(micro):
    # The micro-step loop comes round at its head (the arange) a few times between two
    # loss.item() reads: unrolled into the step's trace, not two variants of a loop trace.
    eager, _ = run(False, 14, accumulation_step(micro))
    traced, (before, after) = run(True, 14, accumulation_step(micro))
    np.testing.assert_allclose(traced, eager, rtol=1e-4, atol=1e-6)
    assert_steady(before, after)
    assert after.recompiles == [], str(after)
    assert after.unrolled_loops >= 1, str(after)


def test_slice_at_a_moving_offset_is_an_input_not_a_new_trace(rng):
    # data[i:i + 8] with i moving every step (truncated BPTT's get_batch): the slice's
    # bounds are attributes, so each step began a new anchor that never got hot.
    data = t(rng.standard_normal((400, 4)))
    w = t(rng.standard_normal((4, 4)))

    def step(k):
        i = 7 * k
        x, target = data[i:i + 8], data[i + 1:i + 9]
        return ((kiln.tanh(x @ w) - target) ** 2).mean().item()

    eager, _ = run(False, 14, step)
    traced, (before, after) = run(True, 14, step)
    np.testing.assert_allclose(traced, eager, rtol=1e-5)
    assert_steady(before, after)


def kv_cache_step(rng, moving_until):
    """A decoder step with a KV cache written at position pos and read up to it: the
    cache's slices take new bounds every step (until step moving_until; then pos stays)."""
    c, batch, length = 16, 2, 64
    wq, wk, wv = (t(rng.standard_normal((c, c)) * 0.2) for _ in range(3))
    x0 = t(rng.standard_normal((batch, 1, c)))
    state = {}

    def step(k):
        pos = min(k, moving_until)
        if k == 0:
            state["k"], state["v"] = kiln.zeros((batch, length, c)), kiln.zeros((batch, length, c))
            state["x"] = x0
        x = state["x"]
        state["k"][:, pos:pos + 1] = x @ wk
        state["v"][:, pos:pos + 1] = x @ wv
        keys, values = state["k"][:, :pos + 1], state["v"][:, :pos + 1]
        att = kiln.softmax((x @ wq) @ keys.transpose(1, 2) * (1.0 / c ** 0.5), -1)
        state["x"] = kiln.tanh(att @ values)
        return state["x"].numpy()

    return step


@pytest.fixture
def exact_bounds():
    """Symbolic sizes and bounds off: each KV-cache step's slices are then a new path (on,
    they are index symbols of one trace: tests/python/test_symbolic_bounds.py), the stream
    the FreshPathPenalty is for."""
    previous = kiln.set_config(symbolic_shapes=False)
    yield
    kiln.set_config(**previous)


@pytest.mark.usefixtures("exact_bounds")
def test_walks_that_take_a_new_path_every_step_stop_recording(rng):
    # Each step's slices have new bounds, so each walk records a new path that never gets
    # hot: recording cost 7x the eager step and compiled nothing. After 8 such walks in a
    # row the anchor runs eagerly (nothing recorded) for 16 walks, then 32 (backoff).
    seed = int(rng.integers(1 << 30))
    eager, _ = run(False, 40, kv_cache_step(np.random.default_rng(seed), 10 ** 6))
    kiln.reset()
    step = kv_cache_step(np.random.default_rng(seed), 10 ** 6)
    snaps, values = [], []
    for k in range(40):
        if k in (12, 24):
            snaps.append(kiln.explain())
        values.append(step(k))
    after = kiln.explain()
    np.testing.assert_allclose(np.array(values), eager, rtol=1e-5, atol=1e-6)
    assert after.fresh_path_suspensions >= 2, str(after)
    assert snaps[1].ops_recorded == snaps[0].ops_recorded, (snaps[0].ops_recorded,
                                                             snaps[1].ops_recorded)
    assert after.traces == [], str(after)


@pytest.mark.usefixtures("exact_bounds")
def test_a_suspended_anchor_records_again_and_compiles_once_its_paths_repeat(rng):
    seed = int(rng.integers(1 << 30))
    step = kv_cache_step(np.random.default_rng(seed), moving_until=12)
    eager, _ = run(False, 60, step)
    step = kv_cache_step(np.random.default_rng(seed), moving_until=12)
    traced, (before, after) = run(True, 60, step)
    np.testing.assert_allclose(traced, eager, rtol=1e-5, atol=1e-6)
    assert after.fresh_path_suspensions == 1, str(after)
    assert_steady(before, after)


def cast_layers_step(seed, layers=6, micro=2):
    """A step of `micro` micro-steps through `layers` layers of two linear maps that each
    first cast their weight (what autocast does to every linear's weight: an op kiln's
    Tensor.to issues), gradients accumulated, SGD, loss.item() once per step."""
    rng = np.random.default_rng(seed)
    xs = [t(rng.standard_normal((8, 16))) for _ in range(micro)]
    weights = [t(rng.standard_normal((16, 16)) * 0.3).requires_grad_(True)
               for _ in range(2 * layers)]
    opt = kiln.optim.SGD(weights, lr=0.05)

    def step(_):
        for x in xs:
            h = x * 1.0  # the micro-step's first op
            for w1, w2 in zip(weights[0::2], weights[1::2]):
                h = kiln.tanh(h @ w1.to(kiln.float64).to(kiln.float32))
                h = kiln.tanh(h @ w2.to(kiln.float64).to(kiln.float32))
            loss = (h * h).mean() / micro
            loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    return step


@pytest.mark.parametrize("sync", [True, False], ids=["sync_compile", "background_compile"])
def test_layers_that_begin_with_a_weight_cast_are_not_a_loop(rng, sync):
    # Each layer's casts of its weights (ops on externals at one site for all layers)
    # looked like a loop coming round (a guessed head): the per-layer loop compiled within
    # the first step, before the step's host read proved the head false, then recompiled
    # as the step grew, and each cast site was found false one step after another (a
    # bf16-autocast GPT on the H200: 17 traces, 12 recompiles, 8.6 s for its first 10
    # steps). Closures at guessed heads are provisional now, and a head kiln's own helper
    # issued (Tensor.to here) found false is suspended at every call site.
    seed = int(rng.integers(1 << 30))
    eager, _ = run(False, 30, cast_layers_step(seed))
    previous = kiln.set_config(background_compile=not sync)
    try:
        kiln.reset()
        kiln.set_tracing(True)
        step, values, early = cast_layers_step(seed), [], None
        for k in range(30):
            values.append(step(k))
            if k == 7:
                early = kiln.explain()
            if k == 23:
                before = kiln.explain()
        after = kiln.explain()
    finally:
        kiln.set_config(**previous)
    np.testing.assert_allclose(values, eager, rtol=1e-5)
    assert_steady(before, after)
    assert after.recompiles == [] and len(after.traces) == 1, str(after)
    assert after.head_penalties >= 1, str(after)  # the false head was met, and judged
    if sync:  # the step's trace compiled within its first 8 steps
        assert len(early.traces) == 1, str(early)


def test_a_step_called_from_a_second_loop_replays_the_trace_it_has(rng):
    # A site is the op's place in the user's function plus that function's caller, so a
    # training step called from a warmup loop and then from the timed loop (bench/models'
    # run.py) began a new anchor, recorded and compiled again in the timed loop (3 traces
    # for one CNN step on the H200, 17 eager ops a timed step). A walk that begins at the
    # same place in the same function through another caller takes the anchor it has.
    seed = int(rng.integers(1 << 30))
    eager, _ = run(False, 16, cast_layers_step(seed, layers=2))
    kiln.reset()
    step = cast_layers_step(seed, layers=2)
    values = [step(k) for k in range(8)]  # the warmup loop
    before = kiln.explain()
    for k in range(8, 16):
        values.append(step(k))  # the timed loop: another caller of step
    after = kiln.explain()
    np.testing.assert_allclose(values, eager, rtol=1e-5)
    assert_steady(before, after)
    assert len(after.traces) == 1, str(after)


def lstm_step():
    """PyTorch's word_language_model step, small: embedding, a 2-layer nn.LSTM with the
    hidden state detached between batches, a linear decoder, log_softmax + nll_loss,
    clip_grad_norm_, SGD; batches sliced from a token array at a moving offset."""
    kiln.manual_seed(3)
    rng = np.random.default_rng(3)
    enc, rnn, dec = nn.Embedding(50, 8), nn.LSTM(8, 8, 2), nn.Linear(8, 50)
    params = list(enc.parameters()) + list(rnn.parameters()) + list(dec.parameters())
    opt = kiln.optim.SGD(params, lr=0.5)
    data = kiln.tensor(rng.integers(0, 50, (400, 3)))
    state = {"hidden": (kiln.zeros(2, 3, 8), kiln.zeros(2, 3, 8))}

    def step(k):
        i = (6 * k) % 380
        x, y = data[i:i + 6], data[i + 1:i + 7].reshape(-1)
        hidden = tuple(v.detach() for v in state["hidden"])
        for p in params:
            p.grad = None
        out, state["hidden"] = rnn(enc(x), hidden)
        loss = F.nll_loss(F.log_softmax(dec(out).view(-1, 50), dim=1), y)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.25)
        opt.step()
        return loss.item()

    return step


@pytest.mark.parametrize("limit", [None, 700], ids=["fits", "longer_than_the_limit"])
def test_lstm_step_is_one_trace_or_two_cut_at_the_limit(limit):
    # The step (1,099 ops: 6 time steps x 2 layers, forward and backward) is one trace;
    # with a maximum length below it, it is cut at the same op every step: two traces,
    # and no recompile either way.
    eager, _ = run(False, 14, lstm_step())
    previous = kiln.set_config(max_trace_length=limit) if limit else None
    try:
        traced, (before, after) = run(True, 14, lstm_step())
    finally:
        if previous:
            kiln.set_config(**previous)
    np.testing.assert_allclose(traced, eager, rtol=1e-4, atol=1e-6)
    assert_steady(before, after, traces=1 if limit is None else 2)
    assert after.recompiles == [], str(after)


def test_an_inference_loop_without_host_reads_is_traced(rng):
    # A model made right before the loop (its weights' init ops in the same walk as the
    # loop: no host read between) and a loop that keeps its outputs lazily (a generation
    # or evaluation loop reading them at the end): no op of the loop had only external
    # inputs (the weights were values of the walk), so no loop head was ever found, and
    # the loop recorded one walk up to the maximum trace length (bench/models' block
    # without its host reads: 3,280 ops over 120 calls, nothing compiled). The matmul on
    # the same weights and a fresh batch now closes the loop there.
    batches = [rng.standard_normal((6, 16)).astype(np.float32) for _ in range(4)]

    def program(traced):
        kiln.reset()
        kiln.set_tracing(traced)
        previous = kiln.set_config(background_compile=False)
        try:
            kiln.manual_seed(5)
            model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
            model.eval()
            kept, snaps = [], []
            for k in range(40):
                if k == 34:
                    snaps.append(kiln.explain())
                x = kiln.from_numpy(batches[k % 4])
                with kiln.no_grad():
                    kept.append(model(x)[:, -1])
            snaps.append(kiln.explain())
            return np.stack([v.numpy() for v in kept]), snaps
        finally:
            kiln.set_config(**previous)
            kiln.set_tracing(True)

    eager, _ = program(False)
    traced, (before, after) = program(True)
    np.testing.assert_allclose(traced, eager, rtol=1e-5, atol=1e-6)
    assert_steady(before, after)


def test_a_loop_that_reads_the_host_once_then_runs_on_replays_again(rng):
    # One host read in a loop that runs on without reads (a loss printed once): the read
    # judged the loop's head false and suspended it for 16 walks; with no read to end
    # them, each walk ran to the 8192-op limit, so the loop recorded eagerly for
    # 16 x 8192 ops (py_overhead.py's lazy-replay lines: 16k of 710k ops recorded). A
    # walk through a suspended head that reaches the limit lifts the suspension.
    xs, ws = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    x, w = kiln.tensor(xs), kiln.tensor(ws)

    def body(x, w):
        y = x * w + 1.0
        y = y * w - x
        return (y * y).sin() + w

    def loop(n):
        for _ in range(n):
            y = body(x, w)
        return y

    want = np.sin((((xs * ws + 1.0) * ws - xs) ** 2)) + ws
    kiln.reset()
    kiln.set_tracing(True)
    loop(50)
    assert len(kiln.explain().traces) == 1, str(kiln.explain())
    loop(10).sum().item()  # the one host read
    recorded = kiln.explain().ops_recorded
    y = loop(3000)  # at most one walk of 8192 ops records, then the loop replays
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    mid = kiln.explain()
    assert mid.ops_recorded - recorded <= 8192 + 16, str(mid)
    y = loop(3000)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    after = kiln.explain()
    assert after.ops_recorded == mid.ops_recorded, str(after)
    assert after.ops_replayed - mid.ops_replayed >= 3000 * 7 - 16, str(after)
    # Proven a loop's head, later reads (a loop synced now and then) suspend it no more.
    for _ in range(3):
        loop(10).sum().item()
        y = loop(1000)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    last = kiln.explain()
    assert last.ops_recorded - after.ops_recorded <= 3 * 16, str(last)
