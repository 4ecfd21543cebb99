#!/usr/bin/env python3
"""kiln's demo (the README's first command, scripts/demo.sh): plain eager model code,
written the way a PyTorch user writes it, gets faster after a warmup.

It runs the seed MLP and a transformer block (attention + layer_norm + MLP) for N
iterations (and on while a background compile is in flight), on the GPU when there is one, else the CPU, with no kiln-specific change to
the model code: kiln's tracer records the op stream, compiles it once it repeats and
replays fused kernels. The loop prints the loss every few iterations (``loss.item()``,
as users do): a deliberate graph break, which explain() reports with its cost.

Prints the per-iteration time before and after warmup, the speedup and the explain()
table; writes the warmup plot (warmup.svg, or .png with --png) and, when kiln has a
profiler, a Chrome trace of a few steady-state iterations, to --out.

    PYTHONPATH=build/python /usr/bin/python3 examples/demo.py [--quick] [--device cpu]
"""

import argparse
import math
import os
import statistics
import sys
import time

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


# ---- the model code: unchanged eager code, nothing kiln-specific below this line
class MLP(nn.Module):
    """The seed MLP: x @ W1 + b1 -> relu -> ... -> logits."""

    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    """A pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


# ---- end of the model code


def sync(device, *tensors):
    """Waits for all work: a memory read runs any pending lazy (traced) work, then on
    the GPU wait for the stream. Not used inside the timed loop: there a replay runs
    when the loop comes round to the trace's first op again (reading memory in the
    middle of a pending trace would be a side exit every iteration)."""
    for t in tensors:
        t.data_ptr()
    if device.type == "cuda":
        kiln.cuda.synchronize()


def progress(i, n, t_ms, loss, width=30):
    done = int(width * (i + 1) / n)
    bar = "#" * done + "." * (width - done)
    shown = "" if loss is None else f"  loss {loss:.4f}"
    sys.stdout.write(f"\r  [{bar}] {i + 1}/{n}  {t_ms:8.3f} ms/iter{shown}")
    sys.stdout.flush()


def train(mlp, block, x, tokens, target, device, n, every, quiet=False):
    """The training-script loop; returns per-iteration times, compile events (iteration,
    label) and the losses printed."""
    times, events, losses, compiled = [], [], [], 0
    in_flight = getattr(getattr(kiln, "_kiln", None), "_compiles_in_flight", lambda: 0)
    start, i, landed, was_busy = time.perf_counter(), 0, -1, False
    while True:
        # Compiles run in the background while the loop goes on eagerly, so a plan may
        # land after the n iterations (a GPU trace's NVRTC compile takes about a second;
        # 200 iterations of this loop take a tenth of that). A compile done is installed
        # at its trace's next walk. The loop runs on until none is in flight and the last
        # finished n // 2 iterations ago (at most 60 s), so that the steady state below
        # is one.
        busy = bool(in_flight())
        if was_busy and not busy:
            landed = i
        was_busy = busy
        if i >= n:
            last = max(events[-1][0] if events else -1, landed)
            if (not busy and i - last > n // 2) or time.perf_counter() - start > 60:
                break
        t0 = time.perf_counter()
        # ---- the loop body, as a PyTorch user writes it
        logits = mlp(x)
        loss = ((logits - target) ** 2).mean()
        if (i + 1) % every == 0:
            losses.append(loss.item())  # print the loss now and then: the graph break
        h = block(tokens)
        total = loss + (h * h).mean()
        # ----
        if device.type == "cuda":
            kiln.cuda.synchronize()  # count the GPU's time, not only the launches
        times.append(time.perf_counter() - t0)
        now = len(kiln.explain().traces)  # new compiled traces: marked on the plot
        if now > compiled:
            events.append((i, f"compile ({now - compiled})"))
            compiled = now
        if not quiet and ((i + 1) % max(1, n // 20) == 0 or i + 1 == n):
            progress(i, max(n, i + 1), times[-1] * 1e3, losses[-1] if losses else None)
        i += 1
    t0 = time.perf_counter()
    sync(device, total)  # the last iteration's replay runs here
    times[-1] += time.perf_counter() - t0
    if not quiet:
        print()
    return times, events, losses


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=None,
                   help="loop iterations (default 200, 60 with --quick)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--quick", action="store_true", help="small sizes and few iterations (CI)")
    p.add_argument("--print-every", type=int, default=None,
                   help="print loss.item() every k iterations: the graph break (default 20)")
    p.add_argument("--out", default="demo-out", help="output directory (default ./demo-out)")
    p.add_argument("--png", action="store_true", help="plot to PNG (needs matplotlib)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    dev = args.device or ("cuda" if kiln.cuda.is_available() else "cpu")
    device = kiln.device(dev)
    n = args.iterations or (60 if args.quick else 200)
    every = args.print_every or (10 if args.quick else 25)
    if n < 10:
        sys.exit("demo: --iterations must be at least 10")
    os.makedirs(args.out, exist_ok=True)
    name = kiln.cuda.get_device_name(device.index or 0) if device.type == "cuda" else "CPU"

    # sizes: the seed MLP and a small GPT block. On the CPU (and with --quick) smaller
    # ones: at the larger sizes a 2-core CPU spends nearly all its time in the BLAS
    # matmuls, which run the same with and without kiln's JIT.
    small = args.quick or device.type == "cpu"
    batch, d_in, hidden, d_out = (64, 256, 512, 10) if small else (256, 512, 1024, 10)
    B, T, C, heads = (4, 64, 128, 4) if small else (8, 128, 256, 8)
    print(f"kiln demo on {dev} ({name}), {n} iterations, loss printed every {every}")
    print(f"  MLP {d_in} -> {hidden} -> {hidden} -> {d_out}, batch {batch}; transformer "
          f"block dim {C}, {heads} heads, {B}x{T} tokens; float32")

    kiln.manual_seed(0)
    mlp, block = MLP(d_in, hidden, d_out).to(device), Block(C, heads).to(device)
    x = kiln.randn(batch, d_in, device=device)
    target = kiln.randn(batch, d_out, device=device)
    tokens = kiln.randn(B, T, C, device=device)
    # eager reference: the same loop with kiln's tracer off
    tracing = kiln.is_tracing()  # on unless KILN_TRACE=0
    kiln.set_tracing(False)
    eager, _, _ = train(mlp, block, x, tokens, target, device, max(5, n // 10), every, quiet=True)
    kiln.set_tracing(tracing)
    if not tracing:
        print("  KILN_TRACE=0: automatic tracing is off, so nothing compiles below")
    kiln.reset()  # explain() then reports the traced loop only
    times, events, losses = train(mlp, block, x, tokens, target, device, n, every)
    report(eager, times, events, every)
    print()
    print(kiln.explain())
    path = os.path.join(args.out, "warmup.png" if args.png else "warmup.svg")
    kiln.plot_warmup(times, events=events, path=path,
                     title=f"kiln demo on {dev}: MLP + transformer block, time per iteration")
    print(f"warmup plot: {path} ({len(times)} iterations, {len(events)} compile event(s))")
    chrome_trace(args.out, every, lambda: train(mlp, block, x, tokens, target, device, every,
                                                every, quiet=True))
    return 0


def report(eager, times, events, every):
    """Before warmup (the same loop with the tracer off, and the loop's first iterations,
    eager while recording) against the steady state (the second half of the loop,
    leaving out the iterations that print)."""
    first = max(1, events[0][0] if events else 1)
    before = statistics.median(eager + times[:first])
    # the second half of the loop, after the last plan landed
    half = max(len(times) // 2, events[-1][0] + 1 if events else 0)
    steady = [t for i, t in enumerate(times) if i >= half and (i + 1) % every != 0]
    after = statistics.median(steady or times[half:] or times[-1:])
    print(f"per-iteration time before warmup (eager: {len(eager)} iterations with tracing off "
          f"+ the loop's first {first}): median {before * 1e3:.3f} ms")
    if events:
        print("compiling iteration(s): " + ", ".join(
            f"{i} ({times[i] * 1e3:.1f} ms)" for i, _ in events))
    print(f"per-iteration time after warmup (steady state, {len(steady)} iterations): "
          f"median {after * 1e3:.3f} ms")
    print(f"speedup after warmup: {before / after:.2f}x")


def chrome_trace(out, iterations, run):
    """Profiles `iterations` more steady-state iterations of the loop (one of them
    prints), when this build has kiln.profile."""
    if not hasattr(kiln, "profile"):
        print("profiler: not available in this build (kiln.profile); no Chrome trace written")
        return
    path = os.path.join(out, "trace.json")
    try:
        with kiln.profile() as prof:
            run()
        prof.export_chrome_trace(path)
    except Exception as e:  # the report above stands; say what went wrong
        print(f"profiler failed: {type(e).__name__}: {e}", file=sys.stderr)
        return
    print(f"chrome trace of {iterations} steady-state iterations: {path} (open in "
          "ui.perfetto.dev)")
    print(prof.table(row_limit=12) if hasattr(prof, "table") else prof)


if __name__ == "__main__":
    sys.exit(main())
