"""bench/models' GPT (nanoGPT), small, trained a few AdamW steps with gradient
accumulation and clip_grad_norm_: data-parallel over the default process group (each
rank takes its slice of the global batch; DistributedDataParallel, no_sync() on the
first micro-step) or in one process on the whole global batch. Dropout is off, so both
compute the same function: their parameters must agree."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                "models"))
import compat  # noqa: E402
import gpt  # noqa: E402
from common import weights_like  # noqa: E402

CONFIG = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, dropout=0.0,
              bias=False)
BATCH = 8  # the global batch (world_size must divide it)
STEPS = 3
GRAD_ACCUM = 2


def train(kiln, seed, world_size=1, rank=0, ddp=False, steps=STEPS, on_step=None):
    """{parameter name: float32 array} after `steps` optimizer steps, and the losses.
    on_step(s), when given, is called after step s's loss.item()."""
    compat.prepare(kiln)
    kiln.manual_seed(seed)
    model = gpt.define(kiln)["GPT"](dict(CONFIG))
    weights_like(kiln, model, gpt.gpt_init(CONFIG["n_layer"]), seed)
    if ddp and rank != 0:  # DDP must make every rank start from rank 0's weights
        with kiln.no_grad():
            for p in model.parameters():
                p.add_(0.5)
    net = kiln.nn.parallel.DistributedDataParallel(model) if ddp else model
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
    data = np.random.default_rng(seed + 1).integers(0, CONFIG["vocab_size"], 10_000)
    rows = np.random.default_rng(seed + 2)
    per_rank = BATCH // world_size
    t = CONFIG["block_size"]
    losses = []
    for s in range(steps):
        for micro in range(GRAD_ACCUM):
            ix = rows.integers(0, len(data) - t - 1, BATCH)[rank * per_rank:(rank + 1) * per_rank]
            x = kiln.from_numpy(np.stack([data[i:i + t] for i in ix]).astype(np.int64))
            y = kiln.from_numpy(np.stack([data[i + 1:i + 1 + t] for i in ix]).astype(np.int64))
            sync_off = ddp and micro < GRAD_ACCUM - 1
            if sync_off:
                with net.no_sync():
                    _, loss = net(x, y)
            else:
                _, loss = net(x, y)
            (loss / GRAD_ACCUM).backward()
        kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if on_step is not None:
            on_step(s)
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}, losses
