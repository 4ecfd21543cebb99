"""The seed models, written once the way PyTorch users write them and instantiated with
torch and with kiln (`lib` is either module): an MLP, an LSTM cell, LeNet-5 and a
transformer block with multi-head attention. The kiln model gets the torch model's
weights through load_state_dict and must match its outputs."""

import math

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, randn, requires_torch, t, torch

pytestmark = requires_torch


def define(lib):
    nn, F = lib.nn, lib.nn.functional

    class MLP(nn.Module):
        def __init__(self, d_in, hidden, d_out):
            super().__init__()
            self.fc1 = nn.Linear(d_in, hidden)
            self.fc2 = nn.Linear(hidden, hidden)
            self.fc3 = nn.Linear(hidden, d_out)

        def forward(self, x):
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            return self.fc3(x)

    class LSTMCell(nn.Module):
        """gates = x @ wi + h @ wh + b; i, f, g, o = gates.chunk(4, 1)."""

        def __init__(self, d_in, hidden):
            super().__init__()
            self.wi = nn.Parameter(lib.randn(d_in, 4 * hidden) / math.sqrt(d_in))
            self.wh = nn.Parameter(lib.randn(hidden, 4 * hidden) / math.sqrt(hidden))
            self.b = nn.Parameter(lib.zeros(4 * hidden))

        def forward(self, x, state):
            h, c = state
            gates = x @ self.wi + h @ self.wh + self.b
            i, f, g, o = gates.chunk(4, 1)
            i, f, g, o = lib.sigmoid(i), lib.sigmoid(f), lib.tanh(g), lib.sigmoid(o)
            c = f * c + i * g
            h = o * lib.tanh(c)
            return h, c

    class LeNet5(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2, 2))
            self.classifier = nn.Sequential(
                nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84),
                nn.ReLU(), nn.Linear(84, num_classes))

        def forward(self, x):
            return self.classifier(self.features(x))

    class SelfAttention(nn.Module):
        def __init__(self, dim, heads, dropout=0.1):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.drop = nn.Dropout(dropout)

        def forward(self, x, causal=True):
            B, T, C = x.shape
            q, k_, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            k_ = k_.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            att = (q @ k_.transpose(-2, -1)) * (1.0 / math.sqrt(k_.size(-1)))
            if causal:
                mask = lib.ones(T, T, dtype=lib.bool).triu(1)
                att = att.masked_fill(mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.drop(att)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.proj(y)

    class Block(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.attn = SelfAttention(dim, heads)
            self.ln2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * dim, dim), nn.Dropout(0.1))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class TorchStyleMHABlock(nn.Module):
        """The same block with nn.MultiheadAttention (batch_first)."""

        def __init__(self, dim, heads):
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
            self.ln2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, 2 * dim)
            self.fc2 = nn.Linear(2 * dim, dim)

        def forward(self, x, mask=None):
            h = self.ln1(x)
            a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
            x = x + a
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    return {"MLP": MLP, "LSTMCell": LSTMCell, "LeNet5": LeNet5, "Block": Block,
            "MHABlock": TorchStyleMHABlock}


TORCH_MODELS = define(torch) if torch is not None else {}
KILN_MODELS = define(kiln)


def build(name, *args):
    tm, km = TORCH_MODELS[name](*args), KILN_MODELS[name](*args)
    km.load_state_dict(tm.state_dict())
    return tm.eval(), km.eval()


def test_mlp(rng):
    tm, km = build("MLP", 16, 64, 4)
    x = randn(rng, 32, 16)
    with torch.no_grad():
        expected = tm(t(x))
    assert_close(km(k(x)), expected, rtol=1e-4, atol=1e-5)


def test_lstm_cell_over_steps(rng):
    tm, km = build("LSTMCell", 12, 16)
    h = c = np.zeros((4, 16), np.float32)
    th, tc, kh, kc = t(h), t(c), k(h), k(c)
    for _ in range(5):
        x = randn(rng, 4, 12)
        with torch.no_grad():
            th, tc = tm(t(x), (th, tc))
        kh, kc = km(k(x), (kh, kc))
    assert_close(kh, th, rtol=1e-4, atol=1e-5)
    assert_close(kc, tc, rtol=1e-4, atol=1e-5)


def test_lstm_cell_matches_torch_lstmcell(rng):
    """The same cell checked against torch.nn.LSTMCell (gate order i, f, g, o)."""
    ref = torch.nn.LSTMCell(10, 8)
    km = KILN_MODELS["LSTMCell"](10, 8)
    sd = ref.state_dict()
    km.load_state_dict({"wi": sd["weight_ih"].T.contiguous(), "wh": sd["weight_hh"].T.contiguous(),
                        "b": sd["bias_ih"] + sd["bias_hh"]})
    x, h, c = randn(rng, 3, 10), randn(rng, 3, 8), randn(rng, 3, 8)
    with torch.no_grad():
        eh, ec = ref(t(x), (t(h), t(c)))
    gh, gc = km(k(x), (k(h), k(c)))
    assert_close(gh, eh, rtol=1e-4, atol=1e-5)
    assert_close(gc, ec, rtol=1e-4, atol=1e-5)


def test_lenet5(rng):
    tm, km = build("LeNet5")
    x = randn(rng, 8, 1, 28, 28)
    with torch.no_grad():
        expected = tm(t(x))
    got = km(k(x))
    assert tuple(got.shape) == (8, 10)
    assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert_close(got.argmax(1), expected.argmax(1))


@pytest.mark.parametrize("name", ["Block", "MHABlock"])
def test_transformer_block(rng, name):
    tm, km = build(name, 32, 4)
    x = randn(rng, 2, 10, 32)
    with torch.no_grad():
        expected = tm(t(x))
    assert_close(km(k(x)), expected, rtol=1e-4, atol=1e-4)


def test_transformer_block_training_mode_uses_dropout(rng):
    _, km = build("Block", 16, 2)
    km.train()
    x = k(randn(rng, 1, 6, 16))
    a, b = km(x), km(x)
    assert not np.array_equal(a.numpy(), b.numpy())
    km.eval()  # deterministic: equal up to fused-vs-eager rounding (the calls may differ in path)
    np.testing.assert_allclose(km(x).numpy(), km(x).numpy(), rtol=1e-5, atol=1e-6)


def test_training_step_by_hand(rng):
    """A PyTorch-style SGD update written with in-place ops on parameters (no autograd:
    the gradient of a linear least-squares loss is written out)."""
    model = KILN_MODELS["MLP"](3, 8, 1)
    w = model.fc3.weight
    before = w.numpy().copy()
    grad = kiln.ones(*w.shape) * 0.5
    with kiln.no_grad():
        for p in [w]:
            p.sub_(grad * 0.1)
    np.testing.assert_allclose(model.fc3.weight.numpy(), before - 0.05, rtol=1e-6)
