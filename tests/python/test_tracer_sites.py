"""Exact sites and loop heads on real op streams (issue 17): a Python site is (code
object, bytecode offset) plus the op's place inside kiln's own helpers, so the same op
twice on a line, a helper called twice or a layer called six times does not look like a
loop coming round, and a training step is one trace. Each traced run is compared with
the same program run eagerly (tracing off), and runs again under KILN_VERIFY."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


@pytest.fixture(autouse=True, params=[False, True], ids=["plain", "verify"])
def fresh_tracer(request):
    kiln.reset()
    kiln.set_tracing(True)
    previous = kiln.set_config(verify=request.param)
    yield
    kiln.set_config(**previous)
    kiln.set_tracing(True)
    kiln.reset()


def t(a):
    return kiln.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def run_eager(fn):
    kiln.set_tracing(False)
    try:
        return fn()
    finally:
        kiln.set_tracing(True)


def delta(before, after):
    """What the tracer did between two explain() snapshots."""
    replays = {(x["id"], x["generation"]): x["replays"] for x in before.traces}
    grew = [x for x in after.traces if x["replays"] > replays.get((x["id"], x["generation"]), 0)]
    return dict(compiles=len(after.traces) - len(before.traces),
                recompiles=len(after.recompiles) - len(before.recompiles),
                recorded=after.ops_recorded - before.ops_recorded, replaying=grew)


def test_two_sites_on_one_line_differ():
    a, b = kiln._C._exact_site(), kiln._C._exact_site()
    assert a[1] == b[1] and a[2] == b[2]  # file and line
    assert a[0] != b[0]  # the site ids
    assert a[3] != b[3] and a[3] > 0  # the columns
    assert a[4] == "test_two_sites_on_one_line_differ"
    key = a[6].split(";")[-1].split("|")  # file|qualname|first line|+offset|#hash
    assert key[1] == "test_two_sites_on_one_line_differ" and key[3].startswith("+")
    assert a[6] != b[6]


def layernorm(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) * (x - mu)).mean(-1, keepdim=True)
    return (x - mu) / (var + 1e-5).sqrt()


def test_written_out_layernorm_loop_is_one_trace_one_kernel(rng):
    x = t(rng.standard_normal((32, 64)))
    expected = run_eager(lambda: layernorm(x).numpy())
    outs = [layernorm(x) for _ in range(12)]  # a plain loop, no host read
    report = kiln.explain()
    assert len(report.traces) == 1, str(report)
    assert report.recompiles == []
    if report.traces[0]["backend"] != "llvm":  # the GPU machine's build: no CPU JIT
        pytest.skip("built without the LLVM JIT: CPU traces are interpreted, not fused")
    assert len(report.traces[0]["ops"]) == 9 and report.traces[0]["kernels"] == 1, str(report)
    for y in outs:
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_same_op_twice_on_a_line_does_not_close_the_loop(rng):
    x = t(rng.standard_normal(16))
    outs = [kiln.exp(x) * kiln.exp(x) for _ in range(10)]
    report = kiln.explain()
    assert len(report.traces) == 1 and report.recompiles == [], str(report)
    assert len(report.traces[0]["ops"]) == 3
    for y in outs:
        np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()) ** 2, rtol=1e-5)


def helper(x):
    return kiln.tanh(x) * 2.0


def test_helper_called_twice_on_a_line(rng):
    x = t(rng.standard_normal(16))
    outs = [helper(x) + helper(x) for _ in range(10)]
    report = kiln.explain()
    assert len(report.traces) == 1 and report.recompiles == [], str(report)
    assert len(report.traces[0]["ops"]) == 5
    for y in outs:
        np.testing.assert_allclose(y.numpy(), 4 * np.tanh(x.numpy()), rtol=1e-5)


def mlp_step_losses(traced, steps, rng_seed=3, six_times=False, zero_to_none=True):
    """An MLP step with the optimizer inside it (AdamW, zero_grad between), loss.item()
    each step; six_times: one Linear layer applied six times to the same input."""
    kiln.manual_seed(rng_seed)
    rng = np.random.default_rng(rng_seed)
    lin, head = nn.Linear(16, 16), nn.Linear(16, 4)
    params = list(lin.parameters()) + list(head.parameters())
    opt = kiln.optim.AdamW(params, lr=1e-2)
    xs = [t(rng.standard_normal((8, 16))) for _ in range(3)]
    ys = [kiln.tensor(rng.integers(0, 4, 8)) for _ in range(3)]
    kiln.reset()
    kiln.set_tracing(traced)
    losses, snaps = [], []
    try:
        for step in range(steps):
            if step == steps - 6:
                snaps.append(kiln.explain())
            x = xs[step % 3]
            if six_times:
                h = lin(x)
                for _ in range(5):
                    h = h + lin(x)  # the same layer on the same input: a repeated head
            else:
                h = lin(x)
            loss = F.cross_entropy(head(kiln.relu(h)), ys[step % 3])
            opt.zero_grad(set_to_none=zero_to_none)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        snaps.append(kiln.explain())
    finally:
        kiln.set_tracing(True)
    return np.array(losses), [p.detach().numpy().copy() for p in params], snaps


@pytest.mark.parametrize("six_times", [False, True], ids=["once", "six_times"])
@pytest.mark.parametrize("zero_to_none", [True, False], ids=["grad_none", "grad_zero_"])
def test_optimizer_inside_the_step_is_one_trace(six_times, zero_to_none):
    eager, eager_params, _ = mlp_step_losses(False, 16, six_times=six_times,
                                             zero_to_none=zero_to_none)
    traced, traced_params, (before, after) = mlp_step_losses(
        True, 16, six_times=six_times, zero_to_none=zero_to_none)
    np.testing.assert_allclose(traced, eager, rtol=1e-5, atol=1e-6)
    for e, p in zip(eager_params, traced_params):
        np.testing.assert_allclose(p, e, rtol=1e-4, atol=1e-6)
    d = delta(before, after)
    assert d["compiles"] == 0 and d["recompiles"] == 0 and d["recorded"] == 0, (d, str(after))
    assert len(d["replaying"]) == 1, (d, str(after))  # forward, backward, step: one trace
    assert d["replaying"][0]["replays"] - next(
        x["replays"] for x in before.traces
        if x["id"] == d["replaying"][0]["id"]
        and x["generation"] == d["replaying"][0]["generation"]) == 6


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """nanoGPT's decoder, small: token and position embeddings (an arange), causal
    attention through F.scaled_dot_product_attention, GELU MLP, pre-LayerNorm, tied head."""

    def __init__(self, vocab=48, context=16, d=32, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = kiln.arange(0, T, dtype=kiln.int64)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def gpt_losses(traced, steps=14):
    kiln.manual_seed(11)
    rng = np.random.default_rng(11)
    model = TinyGPT()
    opt = kiln.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    batches = [(kiln.tensor(rng.integers(0, 48, (4, 16))), kiln.tensor(rng.integers(0, 48, (4, 16))))
               for _ in range(4)]
    kiln.reset()
    kiln.set_tracing(traced)
    losses, snaps = [], []
    try:
        for step in range(steps):
            if step == steps - 6:
                snaps.append(kiln.explain())
            idx, targets = batches[step % 4]
            loss = model(idx, targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        snaps.append(kiln.explain())
    finally:
        kiln.set_tracing(True)
    return np.array(losses), snaps


def test_gpt_step_has_no_compiles_after_warmup():
    eager, _ = gpt_losses(False)
    traced, (before, after) = gpt_losses(True)
    np.testing.assert_allclose(traced, eager, rtol=1e-4, atol=1e-5)
    d = delta(before, after)
    assert d["compiles"] == 0 and d["recompiles"] == 0 and d["recorded"] == 0, (d, str(after))
    assert 1 <= len(d["replaying"]) <= 2, (d, str(after))
    assert after.recompiles == [], str(after)


def _readers_agree():
    fast, portable, fast_in_use = kiln._C._site_readers()
    assert fast == portable and fast != 0
    return fast, fast_in_use


class _Probe(nn.Module):
    def forward(self):
        return _readers_agree()  # under kiln's Module.__call__: a kiln frame in between


def test_fast_frame_reader_sees_what_the_public_api_sees():
    # The per-op site reads CPython 3.11's frames directly; the public frame API
    # (PyEval_GetFrame / PyFrame_GetBack) must give the same site everywhere.
    ids = [_readers_agree(), _readers_agree()]  # two sites on one line
    ids.append((lambda: _readers_agree())())
    ids.append(_Probe()())
    ids.append(next(iter(_readers_agree() for _ in range(1))))  # a generator's frame
    ids += [_readers_agree() for _ in range(2)]  # one site, seen twice
    assert len({i for i, _ in ids}) == len(ids) - 1
    import sys
    assert ids[0][1] == (sys.version_info[:2] == (3, 11))  # the fast reader where it exists


def test_region_abort_is_reported_where_the_region_was_entered(rng):
    # The region's site is captured cheaply at entry and described only when it aborts.
    x = t(rng.standard_normal(5))

    @kiln.compile
    def fails(x):
        kiln.exp(x) * 3.0
        raise KeyError("boom")

    import inspect
    for _ in range(2):
        with pytest.raises(KeyError):
            line = inspect.currentframe().f_lineno + 1
            fails(x)
    breaks = [b for b in kiln.explain().graph_breaks if b["kind"] == "UserException"]
    assert len(breaks) == 1 and breaks[0]["count"] == 2, breaks
    assert breaks[0]["file"].endswith("test_tracer_sites.py") and breaks[0]["line"] == line
    assert breaks[0]["function"] == "test_region_abort_is_reported_where_the_region_was_entered"


def get_batch_losses(traced, steps, from_numpy):
    """nanoGPT's get_batch inside a training loop: random start indices (randint), each
    element read on the host to slice the token array (a numpy array, or a kiln tensor
    sliced with 0-dim tensors), the rows stacked; an embedding MLP step, AdamW,
    loss.item() each step."""
    kiln.manual_seed(5)
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 32, 4096).astype(np.int64)
    data = tokens if from_numpy else kiln.tensor(tokens)
    emb, head = nn.Embedding(32, 16), nn.Linear(16, 32)
    opt = kiln.optim.AdamW(list(emb.parameters()) + list(head.parameters()), lr=1e-2)
    kiln.reset()
    kiln.set_tracing(traced)
    losses, snaps = [], []

    def get_batch():
        ix = kiln.randint(len(data) - 9, (6,))
        if from_numpy:
            x = kiln.stack([kiln.from_numpy(data[i:i + 8]) for i in ix])
            y = kiln.stack([kiln.from_numpy(data[i + 1:i + 9]) for i in ix])
        else:
            x = kiln.stack([data[i:i + 8] for i in ix])
            y = kiln.stack([data[i + 1:i + 9] for i in ix])
        return x, y

    try:
        for step in range(steps):
            if step == steps - 6:
                snaps.append(kiln.explain())
            x, y = get_batch()
            loss = F.cross_entropy(head(kiln.relu(emb(x))).view(-1, 32), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        snaps.append(kiln.explain())
    finally:
        kiln.set_tracing(True)
    return np.array(losses), snaps


@pytest.mark.parametrize("from_numpy", [True, False], ids=["numpy_tokens", "kiln_tokens"])
def test_batch_indices_read_on_the_host_do_not_cut_the_step(from_numpy):
    eager, _ = get_batch_losses(False, 16, from_numpy)
    traced, (before, after) = get_batch_losses(True, 16, from_numpy)
    # randint runs eagerly in both (host-side after the first step), so both draw the
    # same batches.
    np.testing.assert_allclose(traced, eager, rtol=1e-5, atol=1e-6)
    reads = {(b["line"], b["reason"]): b["count"] for b in after.graph_breaks}
    before_reads = {(b["line"], b["reason"]): b["count"] for b in before.graph_breaks}
    grew = {k: v - before_reads.get(k, 0) for k, v in reads.items() if v > before_reads.get(k, 0)}
    assert list(grew.values()) == [6] and all("item()" in r for _, r in grew), grew  # loss.item()
    # 12 index reads a step, none a boundary (item() asks the tracer twice per read).
    assert after.independent_reads - before.independent_reads >= 6 * 12
    # The batch's stack is inside the step's trace (its unsqueezes close no loop). With
    # kiln tokens, data[i:i + 8]'s bounds are slice attributes that move every step: the
    # slices run host-side, outside the trace, their views its inputs.
    d = delta(before, after)
    assert d["compiles"] == 0 and d["recompiles"] == 0 and d["recorded"] == 0, (d, str(after))
    assert len(d["replaying"]) == 1, (d, str(after))
