"""Training on CUDA (skipped without a GPU): the same steps traced (CUDA JIT, graph
replay) and eager must agree -- a step is forward, backward and optimizer update in one
replayed plan -- and match the CPU. Sizes large enough for the library GEMMs with
epilogues, the long-row reductions and the block row kernels to take part."""

import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from helpers import requires_cuda

pytestmark = requires_cuda


def mlp():
    return nn.Sequential(nn.Linear(1, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 1))


class Block(nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = F.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h)), -1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def train(make, x, y, device, traced, opt_name, steps=8):
    kiln.manual_seed(7)
    model = make()
    model = model.to(device)
    params = list(model.parameters())
    opt = (kiln.optim.SGD(params, lr=1e-3, momentum=0.9) if opt_name == "sgd"
           else kiln.optim.Adam(params, lr=1e-4))
    x, y = x.to(device), y.to(device)
    kiln.reset()
    kiln.set_tracing(traced)
    try:
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        explain = kiln.explain()
    finally:
        kiln.set_tracing(True)
    return np.array(losses), [p.detach().cpu().numpy() for p in params], explain


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
@pytest.mark.parametrize("case", ["mlp_b128", "mlp_b4096", "block_b8"])
def test_traced_cuda_training_matches_eager(case, opt_name):
    rng = np.random.default_rng(3)
    if case.startswith("mlp"):
        n = int(case.split("_b")[1])
        xa = rng.uniform(-2, 2, (n, 1)).astype(np.float32)
        x, y, make = kiln.tensor(xa), kiln.tensor(np.sin(3 * xa)), mlp
    else:
        x = kiln.tensor(rng.standard_normal((8, 64, 256)).astype(np.float32))
        y = kiln.tensor(rng.standard_normal((8, 64, 256)).astype(np.float32))
        make = Block
    eager, w_eager, _ = train(make, x, y, "cuda", False, opt_name)
    traced, w_traced, explain = train(make, x, y, "cuda", True, opt_name)
    cpu, _, _ = train(make, x, y, "cpu", False, opt_name)
    np.testing.assert_allclose(traced, eager, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(eager, cpu, rtol=2e-4, atol=1e-6)
    for a, b in zip(w_traced, w_eager):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert any(t["replays"] >= 3 for t in explain.traces), str(explain)


def test_traced_copies_to_cuda_keep_each_value():
    """Regression: a replayed `to(cuda)` whose result the user holds through a view
    (Parameter's detach) handed out a view of the trace's staging buffer, so every
    parameter copied by the replays showed the last one's values."""
    kiln.set_tracing(True)
    for _ in range(4):
        kiln.manual_seed(7)
        m = Block()
        before = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
        m = m.to("cuda")
        for k, v in m.state_dict().items():
            np.testing.assert_array_equal(v.detach().cpu().numpy(), before[k], err_msg=k)
