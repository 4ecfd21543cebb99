"""CUDA legs of test_rnn.py: nn.LSTM (the fused kiln.lstm_layer on CUDA, ops/cuda/lstm.cu),
nn.GRU and nn.RNN (composed) forward and backward on CUDA against the same modules on the
CPU -- whose results test_rnn.py checks against PyTorch. Also a traced truncated-BPTT
training loop on CUDA (the fused layer inside a captured CUDA graph) against its eager
run. No torch: these run on the GPU machine."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from helpers import (check_module_on_cuda, check_on_cuda, lstm_tbptt_losses, randn,
                     traced_and_eager)
from kiln.nn.modules import rnn as rnn_module

TOL = dict(rtol=1e-4, atol=1e-5)
DTYPES = [np.float32, np.float64]


class _Call(nn.Module):
    """Wraps a recurrent module so that it returns a flat tuple of tensors."""
    def __init__(self, inner, with_state):
        super().__init__()
        self.inner = inner
        self.with_state = with_state

    def forward(self, x, *state):
        st = None
        if self.with_state:
            st = tuple(state) if len(state) > 1 else state[0]
        out, h = self.inner(x, st)
        return (out,) + (h if isinstance(h, tuple) else (h,))


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("layers,bidirectional,batch_first,bias", [
    (1, False, False, True), (2, False, False, True), (1, True, False, True),
    (2, True, True, True), (1, False, True, False)], ids=str)
@pytest.mark.parametrize("with_state", [False, True])
def test_lstm_cuda(cuda_leg, rng, dtype, layers, bidirectional, batch_first, bias, with_state):
    T, B, I, H = 7, 5, 6, 12
    dirs = 2 if bidirectional else 1
    x = randn(rng, *((B, T, I) if batch_first else (T, B, I)), dtype=dtype)
    state = [randn(rng, layers * dirs, B, H, dtype=dtype) for _ in range(2)] if with_state else []

    def make():
        m = nn.LSTM(I, H, num_layers=layers, bidirectional=bidirectional,
                    batch_first=batch_first, bias=bias)
        return _Call(m.double() if dtype == np.float64 else m, with_state)

    check_module_on_cuda(cuda_leg, make, x, *state, **TOL)


def test_lstm_cuda_large(cuda_leg, rng):
    """Sizes whose gate kernel runs several blocks and whose GEMMs are not tiny."""
    T, B, I, H = 20, 37, 40, 130
    x = randn(rng, T, B, I)
    check_module_on_cuda(cuda_leg, lambda: _Call(nn.LSTM(I, H, num_layers=2), False), x,
                         rtol=1e-4, atol=1e-4)


def test_lstm_cuda_single_step(cuda_leg, rng):
    """T = 1: the backward's dw_hh is the h0 term alone."""
    x = randn(rng, 1, 3, 4)
    state = [randn(rng, 1, 3, 8) for _ in range(2)]
    check_module_on_cuda(cuda_leg, lambda: _Call(nn.LSTM(4, 8), True), x, *state, **TOL)


@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_layer_cuda(cuda_leg, rng, reverse):
    """The raw op with every input differentiable (xw, h0, c0, w_hh)."""
    T, B, H = 6, 4, 9
    xw, h0, c0 = randn(rng, T, B, 4 * H), randn(rng, B, H), randn(rng, B, H)
    w = randn(rng, 4 * H, H) * 0.3
    check_on_cuda(cuda_leg, lambda *a: kiln.lstm_layer(*a, reverse=reverse), xw, h0, c0, w,
                  grad=True, **TOL)


def test_lstm_cuda_fused_matches_composed(cuda_leg, rng):
    """On CUDA the fused layer and the composed steps agree (float64, to 1e-10)."""
    x = randn(rng, 8, 3, 5, dtype=np.float64)
    results = []
    for fused in (True, False):
        kiln.manual_seed(1)
        m = nn.LSTM(5, 7, num_layers=2, bidirectional=True).double().to(cuda_leg)
        xt = kiln.from_numpy(x).to(cuda_leg).requires_grad_()
        old = rnn_module.fused_lstm
        rnn_module.fused_lstm = fused
        try:
            out, (h, c) = m(xt)
        finally:
            rnn_module.fused_lstm = old
        (out.sum() + (h * c).sum()).backward()
        results.append([out.cpu().numpy(), h.cpu().numpy(), c.cpu().numpy(),
                        xt.grad.cpu().numpy()] +
                       [p.grad.cpu().numpy() for p in m.parameters()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["GRU", "RNN"])
def test_gru_rnn_cuda(cuda_leg, rng, mode):
    x = randn(rng, 6, 4, 5)
    check_module_on_cuda(cuda_leg, lambda: _Call(getattr(nn, mode)(5, 8, num_layers=2), False),
                         x, **TOL)


def test_lstm_training_loop_traced_cuda(cuda_leg):
    """Truncated BPTT on CUDA (the state detached between batches, SGD): the traced loop
    (compiled, its CUDA graph replaying the fused layers) gives eager's losses."""
    traced, eager = traced_and_eager(lambda: lstm_tbptt_losses(cuda_leg))
    np.testing.assert_allclose(traced, eager, rtol=1e-5, atol=1e-6)
