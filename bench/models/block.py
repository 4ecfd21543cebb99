"""Transformer-block inference loop: the GPT block of gpt.py (pre-LayerNorm, causal
SDPA, GELU MLP) in eval mode under no_grad, a new input batch each call (copied from the
host as a data loader hands it in), the last position's output kept on the host as a
generation loop keeps it.
"""

import numpy as np

import gpt
from common import weights_like

SIZES = {
    "gpu": dict(n_embd=384, n_head=6, block_size=256, batch_size=16, n_layer=1),
    "cpu": dict(n_embd=256, n_head=4, block_size=128, batch_size=8, n_layer=1),
}


class Inference:
    def __init__(self, fw, device, size="cpu", batches=4, seed=1337):
        fw.manual_seed(seed)
        self.fw, self.device = fw, device
        self.cfg = dict(SIZES[size], dropout=0.0, bias=False)
        self.model = gpt.define(fw)["Block"](self.cfg)
        weights_like(fw, self.model, gpt.gpt_init(1), seed)
        self.model.to(device)
        self.model.eval()
        self.forward = self.model
        rng = np.random.default_rng(seed)
        shape = (self.cfg["batch_size"], self.cfg["block_size"], self.cfg["n_embd"])
        self.inputs = [rng.standard_normal(shape).astype(np.float32) for _ in range(batches)]
        self.calls = 0
        self.out = None

    def compile(self, fn):
        self.forward = fn(self.model)

    def step(self):
        x = self.fw.from_numpy(self.inputs[self.calls % len(self.inputs)]).to(self.device)
        self.calls += 1
        with self.fw.no_grad():
            y = self.forward(x)
        self.out = y[:, -1, :].cpu()  # what the loop keeps
        return None

    def check_value(self):
        return float(np.abs(self.out.numpy()).sum())


def make(fw, device, size="cpu", **options):
    return Inference(fw, device, size, **options)
