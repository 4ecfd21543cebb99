#!/usr/bin/env python3
"""The demo's step (examples/demo.py: the seed MLP and a transformer block, their losses
summed) timed four ways on one device, under kiln.no_grad() (skip mode needs it: a call
whose inputs require grad runs the body):

  eager      the plain loop with the tracer off (kiln.set_tracing(False), as KILN_TRACE=0)
  traced     the plain loop, traced: lazy replay, the Python body runs every step
  compile    kiln.compile(step) of the step as a module: the body runs every step
  skip       kiln.compile(step, skip=True): after verification the plan launches alone

Median step time after warmup over --steps steps (7 repeats), with the loss read on the
host every --every steps as the demo does. Same sizes as the demo on the CPU.

    PYTHONPATH=build/python /usr/bin/python3 bench/compile_skip.py [--device cpu] [--steps 100]
"""

import argparse
import importlib.util
import os
import statistics
import sys
import time

import kiln
import kiln.nn as nn

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def demo_module():
    spec = importlib.util.spec_from_file_location("kiln_demo", os.path.join(_ROOT, "examples",
                                                                            "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


class Step(nn.Module):
    """The demo loop's body as one module: MLP loss plus the block's output energy."""

    def __init__(self, mlp, block):
        super().__init__()
        self.mlp = mlp
        self.block = block

    def forward(self, x, tokens, target):
        logits = self.mlp(x)
        loss = ((logits - target) ** 2).mean()
        h = self.block(tokens)
        return loss + (h * h).mean()


def run(step, inputs, steps, every, repeats, sync):
    per_step = []
    for r in range(repeats + 1):  # the first round is warmup (records, compiles, verifies)
        start = time.perf_counter()
        for i in range(steps):
            total = step(*inputs)
            if (i + 1) % every == 0:
                total.item()
        total.item()
        sync()
        if r:
            per_step.append((time.perf_counter() - start) / steps)
    return statistics.median(per_step), min(per_step)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--every", type=int, default=25, help="loss.item() every k steps")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tiny", action="store_true",
                    help="tiny sizes (batch 4, widths 16): the Python side's share of a step")
    args = ap.parse_args()
    demo = demo_module()
    device = kiln.device(args.device)
    small = device.type == "cpu"
    batch, d_in, hidden, d_out = (64, 256, 512, 10) if small else (256, 512, 1024, 10)
    B, T, C, heads = (4, 64, 128, 4) if small else (8, 128, 256, 8)
    if args.tiny:
        batch, d_in, hidden, d_out, B, T, C, heads = 4, 16, 16, 4, 1, 4, 16, 2
    kiln.manual_seed(0)
    step = Step(demo.MLP(d_in, hidden, d_out), demo.Block(C, heads)).to(device)
    inputs = (kiln.randn(batch, d_in, device=device), kiln.randn(B, T, C, device=device),
              kiln.randn(batch, d_out, device=device))

    def sync():
        if device.type == "cuda":
            kiln.cuda.synchronize()

    kiln.set_config(background_compile=False)  # compiles land in the warmup round
    rows = []
    with kiln.no_grad():
        with kiln.no_grad():
            want = step(*inputs).item()
        kiln.set_tracing(False)
        rows.append(("eager (tracer off)", run(step, inputs, args.steps, args.every,
                                               args.repeats, sync), ""))
        kiln.set_tracing(True)
        kiln.reset()
        rows.append(("traced plain loop", run(step, inputs, args.steps, args.every,
                                              args.repeats, sync), ""))
        kiln.reset()
        compiled = kiln.compile(step)
        rows.append(("compile(step)", run(compiled, inputs, args.steps, args.every,
                                          args.repeats, sync), ""))
        kiln.reset()
        skipping = kiln.compile(step, skip=True)
        timing = run(skipping, inputs, args.steps, args.every, args.repeats, sync)
        s = skipping._skipping
        rows.append(("compile(step, skip=True)", timing,
                     f"skipped {s.skipped_calls} of {(args.repeats + 1) * args.steps} calls"))
        got = skipping(*inputs).item()
    assert abs(got - want) <= 1e-4 * max(1.0, abs(want)), (got, want)
    load = os.getloadavg()[0]
    print(f"demo step on {device.type}: MLP {d_in}->{hidden}->{hidden}->{d_out} batch {batch}, "
          f"block dim {C} x {B}x{T} tokens, no_grad; {args.steps} steps x {args.repeats}, "
          f"loss read every {args.every}; load {load:.2f}; python "
          f"{sys.version_info.major}.{sys.version_info.minor}")
    base = rows[0][1][0]
    for name, (median, best), note in rows:
        print(f"  {name:26s} {median * 1e3:8.3f} ms/step  (min {best * 1e3:.3f}; "
              f"{base / median:.2f}x eager) {note}")


if __name__ == "__main__":
    main()
