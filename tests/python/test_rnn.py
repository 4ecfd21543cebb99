"""kiln.nn.RNN / LSTM / GRU and their cells against torch.nn on copied weights: the
state_dict keys (PyTorch's names, so torch's state_dict loads), outputs, final states
and the gradients of inputs, initial states and every parameter, on fresh random
inputs; the initialization bound; PyTorch's error types for bad arguments."""

import math

import numpy as np
import pytest

import kiln
from helpers import (assert_close, k, lstm_tbptt_losses, requires_torch, t, torch,
                     traced_and_eager)

pytestmark = requires_torch

TOL = {"float64": dict(rtol=1e-9, atol=1e-10), "float32": dict(rtol=2e-4, atol=2e-5)}

RNN_CASES = [
    ("RNN", dict()),
    ("RNN", dict(nonlinearity="relu", num_layers=2)),
    ("RNN", dict(bidirectional=True, bias=False)),
    ("LSTM", dict()),
    ("LSTM", dict(num_layers=2, bidirectional=True)),
    ("LSTM", dict(proj_size=3)),
    ("LSTM", dict(proj_size=2, num_layers=2, bidirectional=True, batch_first=True)),
    ("LSTM", dict(bias=False, batch_first=True)),
    ("GRU", dict()),
    ("GRU", dict(num_layers=3, batch_first=True)),
    ("GRU", dict(bidirectional=True, num_layers=2, bias=False)),
]


def make_pair(cls, args, kwargs, dtype):
    """A torch module and a kiln one with torch's weights loaded through state_dict."""
    tm = getattr(torch.nn, cls)(*args, **kwargs).to(getattr(torch, dtype))
    km = getattr(kiln.nn, cls)(*args, **kwargs, dtype=getattr(kiln, dtype))
    assert list(km.state_dict().keys()) == list(tm.state_dict().keys())
    km.load_state_dict(tm.state_dict())
    return tm, km


def leaf_pair(rng, shape, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    return k(a).requires_grad_(True), t(a).requires_grad_(True)


def backprop(rng, outs_k, outs_t, dtype):
    """Backward of sum(out * random weights) over the outputs, the same in both."""
    lk, lt = 0, 0
    for ok, ot in zip(outs_k, outs_t):
        w = rng.standard_normal(tuple(ot.shape)).astype(dtype)
        lk = lk + (ok * k(w)).sum()
        lt = lt + (ot * t(w)).sum()
    lk.backward()
    lt.backward()


def compare_grads(km, tm, tol):
    tparams = dict(tm.named_parameters())
    for name, kp in km.named_parameters():
        assert kp.grad is not None, name
        assert_close(kp.grad, tparams[name].grad, **tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cls,kwargs", RNN_CASES)
def test_rnn_matches_torch(rng, cls, kwargs, dtype):
    n_in, hidden, seq, batch = 5, 4, 6, 3
    tm, km = make_pair(cls, (n_in, hidden), kwargs, dtype)
    dirs = 2 if kwargs.get("bidirectional") else 1
    layers = kwargs.get("num_layers", 1)
    h_out = kwargs.get("proj_size") or hidden
    x_shape = (batch, seq, n_in) if kwargs.get("batch_first") else (seq, batch, n_in)
    xk, xt = leaf_pair(rng, x_shape, dtype)
    hk, ht = leaf_pair(rng, (layers * dirs, batch, h_out), dtype)
    if cls == "LSTM":
        ck, ct = leaf_pair(rng, (layers * dirs, batch, hidden), dtype)
        ok, (hnk, cnk) = km(xk, (hk, ck))
        ot, (hnt, cnt) = tm(xt, (ht, ct))
        outs_k, outs_t = [ok, hnk, cnk], [ot, hnt, cnt]
    else:
        ok, hnk = km(xk, hk)
        ot, hnt = tm(xt, ht)
        outs_k, outs_t = [ok, hnk], [ot, hnt]
    tol = TOL[dtype]
    for a, b in zip(outs_k, outs_t):
        assert_close(a, b.detach(), **tol)
    backprop(rng, outs_k, outs_t, dtype)
    assert_close(xk.grad, xt.grad, **tol)
    assert_close(hk.grad, ht.grad, **tol)
    if cls == "LSTM":
        assert_close(ck.grad, ct.grad, **tol)
    compare_grads(km, tm, tol)


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
def test_rnn_default_state_and_unbatched(rng, cls):
    tm, km = make_pair(cls, (3, 5), dict(num_layers=2), "float64")
    x = rng.standard_normal((4, 3))  # unbatched (L, H_in), no initial state
    ok, hk = km(k(x))
    ot, ht = tm(t(x))
    assert_close(ok, ot.detach(), **TOL["float64"])
    for a, b in zip(hk if cls == "LSTM" else [hk], ht if cls == "LSTM" else [ht]):
        assert tuple(a.shape) == tuple(b.shape)
        assert_close(a, b.detach(), **TOL["float64"])


def test_rnn_dropout_between_layers_only_in_training(rng):
    tm, km = make_pair("LSTM", (3, 4), dict(num_layers=2, dropout=0.5), "float64")
    x = rng.standard_normal((5, 2, 3))
    km.eval()
    tm.eval()
    assert_close(km(k(x))[0], tm(t(x))[0].detach(), **TOL["float64"])
    km.train()
    kiln.manual_seed(0)
    a = km(k(x))[0]
    kiln.manual_seed(1)
    b = km(k(x))[0]
    assert not np.allclose(a.numpy(), b.numpy())  # dropout draws differ in training


@pytest.mark.parametrize("cls,chunks", [("RNN", 1), ("LSTM", 4), ("GRU", 3)])
def test_rnn_init_is_uniform_in_bound(cls, chunks):
    hidden = 16
    m = getattr(kiln.nn, cls)(8, hidden, num_layers=2)
    bound = 1 / math.sqrt(hidden)
    allv = np.concatenate([p.numpy().ravel() for p in m.parameters()])
    assert np.all(np.abs(allv) <= bound)
    assert np.abs(allv).max() > 0.95 * bound  # spread over the whole interval
    assert abs(allv.std() - bound / math.sqrt(3)) < 0.1 * bound  # uniform's std
    assert tuple(m.weight_ih_l0.shape) == (chunks * hidden, 8)
    assert tuple(m.weight_ih_l1.shape) == (chunks * hidden, hidden)


CELL_CASES = [("RNNCell", dict()), ("RNNCell", dict(nonlinearity="relu", bias=False)),
              ("LSTMCell", dict()), ("LSTMCell", dict(bias=False)), ("GRUCell", dict()),
              ("GRUCell", dict(bias=False))]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cls,kwargs", CELL_CASES)
def test_cells_match_torch(rng, cls, kwargs, dtype):
    tm, km = make_pair(cls, (5, 4), kwargs, dtype)
    tol = TOL[dtype]
    xk, xt = leaf_pair(rng, (3, 5), dtype)
    hk, ht = leaf_pair(rng, (3, 4), dtype)
    if cls == "LSTMCell":
        ck, ct = leaf_pair(rng, (3, 4), dtype)
        outs_k, outs_t = list(km(xk, (hk, ck))), list(tm(xt, (ht, ct)))
    else:
        outs_k, outs_t = [km(xk, hk)], [tm(xt, ht)]
    for a, b in zip(outs_k, outs_t):
        assert_close(a, b.detach(), **tol)
    backprop(rng, outs_k, outs_t, dtype)
    assert_close(xk.grad, xt.grad, **tol)
    assert_close(hk.grad, ht.grad, **tol)
    compare_grads(km, tm, tol)
    # a sequence of steps (the time-series idiom), unbatched input, no initial state
    x1 = rng.standard_normal(5).astype(dtype)
    a, b = km(k(x1)), tm(t(x1))
    for u, v in zip(a if cls == "LSTMCell" else [a], b if cls == "LSTMCell" else [b]):
        assert_close(u, v.detach(), **tol)


def _raises_like_torch(fn_k, fn_t, match):
    with pytest.raises(Exception) as et:
        fn_t()
    with pytest.raises(et.type, match=match):
        fn_k()


@pytest.mark.parametrize("case", [
    "input_size", "ndim", "hidden_shape", "proj_gru", "proj_big", "dropout", "nonlinearity",
    "cell_input", "cell_hidden"])
def test_rnn_errors_match_torch_types(case):
    def build(lib):
        nn = lib.nn
        if case == "input_size":
            return lambda: nn.GRU(5, 4)(lib.zeros(3, 2, 6))
        if case == "ndim":
            return lambda: nn.LSTM(5, 4)(lib.zeros(3, 2, 5, 1))
        if case == "hidden_shape":
            return lambda: nn.RNN(5, 4, num_layers=2)(lib.zeros(3, 2, 5), lib.zeros(1, 2, 4))
        if case == "proj_gru":
            return lambda: nn.GRU(5, 4, proj_size=2)
        if case == "proj_big":
            return lambda: nn.LSTM(5, 4, proj_size=4)
        if case == "dropout":
            return lambda: nn.LSTM(5, 4, dropout=1.5)
        if case == "nonlinearity":
            return lambda: nn.RNN(5, 4, nonlinearity="gelu")
        if case == "cell_input":
            return lambda: nn.LSTMCell(5, 4)(lib.zeros(2, 3))
        return lambda: nn.GRUCell(5, 4)(lib.zeros(2, 5), lib.zeros(3, 4))

    match = {"input_size": "input_size", "ndim": "dimensions", "hidden_shape": "hidden",
             "proj_gru": "proj_size", "proj_big": "proj_size", "dropout": "dropout",
             "nonlinearity": "nonlinearity", "cell_input": "input_size",
             "cell_hidden": "hidden"}[case]
    _raises_like_torch(build(kiln), build(torch), match)


# ---- the fused LSTM layer (kiln.lstm_layer, ops/lstm_layout.h): nn.LSTM's CPU path

from kiln.nn.modules import rnn as _rnn_module  # noqa: E402


@pytest.fixture
def fused_calls(monkeypatch):
    """Counts kiln.lstm_layer calls made by nn.LSTM (the fused path taken)."""
    calls = []
    real = _rnn_module._C.lstm_layer

    def counted(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(_rnn_module._C, "lstm_layer", counted)
    return calls


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kwargs,loss_on", [
    (dict(num_layers=2), "all"),
    (dict(bidirectional=True), "all"),
    (dict(num_layers=2, bidirectional=True, batch_first=True), "all"),
    (dict(), "c_n"),  # only c_n reaches the loss: the gradient enters at the last c
    (dict(bidirectional=True), "h_n"),
    (dict(bias=False), "output"),
])
def test_fused_lstm_larger_matches_torch(rng, fused_calls, kwargs, loss_on, dtype):
    n_in, hidden, seq, batch = 9, 40, 13, 9  # batch rows split over 2 threads (ops/cpu/lstm.cpp)
    tm, km = make_pair("LSTM", (n_in, hidden), kwargs, dtype)
    dirs = 2 if kwargs.get("bidirectional") else 1
    layers = kwargs.get("num_layers", 1)
    x_shape = (batch, seq, n_in) if kwargs.get("batch_first") else (seq, batch, n_in)
    xk, xt = leaf_pair(rng, x_shape, dtype)
    hk, ht = leaf_pair(rng, (layers * dirs, batch, hidden), dtype)
    ck, ct = leaf_pair(rng, (layers * dirs, batch, hidden), dtype)
    ok, (hnk, cnk) = km(xk, (hk, ck))
    assert len(fused_calls) == layers * dirs
    ot, (hnt, cnt) = tm(xt, (ht, ct))
    tol = TOL[dtype]
    for a, b in zip([ok, hnk, cnk], [ot, hnt, cnt]):
        assert_close(a, b.detach(), **tol)
    pick = {"all": [0, 1, 2], "c_n": [2], "h_n": [1], "output": [0]}[loss_on]
    backprop(rng, [[ok, hnk, cnk][i] for i in pick], [[ot, hnt, cnt][i] for i in pick], dtype)
    assert_close(xk.grad, xt.grad, **tol)
    assert_close(hk.grad, ht.grad, **tol)
    assert_close(ck.grad, ct.grad, **tol)
    compare_grads(km, tm, tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_lstm_large_batch_matches_torch(rng, fused_calls, dtype):
    """A batch of 150: row blocks of 75 per thread, each running its whole time loop."""
    n_in, hidden, seq, batch = 7, 12, 5, 150
    tm, km = make_pair("LSTM", (n_in, hidden), dict(num_layers=2), dtype)
    xk, xt = leaf_pair(rng, (seq, batch, n_in), dtype)
    ok, (hnk, cnk) = km(xk)
    assert len(fused_calls) == 2
    ot, (hnt, cnt) = tm(xt)
    tol = TOL[dtype]
    for a, b in zip([ok, hnk, cnk], [ot, hnt, cnt]):
        assert_close(a, b.detach(), **tol)
    backprop(rng, [ok, hnk, cnk], [ot, hnt, cnt], dtype)
    assert_close(xk.grad, xt.grad, **tol)
    compare_grads(km, tm, tol)


def test_fused_lstm_agrees_with_the_composed_steps(rng, monkeypatch, fused_calls):
    """The same module, fused and composed (fused_lstm = False), on one input: the
    outputs and every gradient agree to float64 rounding."""
    km = kiln.nn.LSTM(6, 24, num_layers=2, bidirectional=True, dtype=kiln.float64)
    x = rng.standard_normal((11, 3, 6))
    w = rng.standard_normal((11, 3, 48))
    results = []
    for fused in (True, False):
        monkeypatch.setattr(_rnn_module, "fused_lstm", fused)
        km.zero_grad()
        xk = k(x).requires_grad_(True)
        out, (h_n, c_n) = km(xk)
        ((out * k(w)).sum() + h_n.sum() + (c_n * c_n).sum()).backward()
        assert len(fused_calls) == 4  # both layers, both directions, fused only
        results.append([out.numpy(), xk.grad.numpy()] +
                       [p.grad.numpy() for p in km.parameters()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_fused_lstm_training_loop_traces(rng):
    """A plain training loop (truncated BPTT, the state detached between batches) over the
    fused op: the traced steps give eager's losses."""
    traced, eager = traced_and_eager(lstm_tbptt_losses)
    np.testing.assert_allclose(traced, eager, rtol=1e-5, atol=1e-6)
