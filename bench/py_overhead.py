#!/usr/bin/env python3
"""Python per-op overhead of a tiny op: `x + x` on a 1-element float32 tensor, kiln vs
PyTorch eager, measured the same way (BENCHMARKS.md): N calls in a loop, divided by N,
7 repeats, the median; a warmup first. On CUDA the device is synchronized after each
repeat's loop (the figure is host time per op while the GPU keeps up).

    PYTHONPATH=build/python /usr/bin/python3 bench/py_overhead.py        # kiln and torch
    ... bench/py_overhead.py --backend kiln --device cuda --calls 20000

One line per system and device, e.g.
    py_overhead kiln  cpu  x + x (1 x float32): 0.712 us/op  [median of 7 x 100000; min 0.70]
With kiln's tracer on (the default) a long loop of one `x + x` is recorded, not
replayed (one op at one site repeating looks like one call issuing it many times, and a
one-op trace would stay eager anyway); the "N-op body" lines time lazy replay: a loop
body of N distinct ops that compiles and replays (the issue 21 target: at most 0.5 us
per op). KILN_TRACE=0 measures plain eager dispatch.
"""

import argparse
import os
import statistics
import sys
import time


def body_fn(ops, name):
    """A straight-line body of `ops` binary ops on x and w (one source line per op), as the
    user's loop body: its ops replay lazily once the loop is hot (bench/callgrind_py_op.py
    uses it too)."""
    lines = ["def body(x, w):", "    y = x + w"]
    for i in range(ops - 1):
        lines.append(f"    y = y {'*-+'[i % 3]} {'wx'[i % 2]}")
    lines.append("    return y")
    scope = {}
    exec(compile("\n".join(lines), f"<{name} body {ops}>", "exec"), scope)
    return scope["body"]


def measure(fn, sync, calls, repeats, warmup):
    for _ in range(warmup):
        fn()
    sync()
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        per_call.append((time.perf_counter() - start) / calls)
    return statistics.median(per_call), min(per_call)


def kiln_case(device):
    import kiln

    if device == "cuda" and not kiln.cuda.is_available():
        return None
    x = kiln.ones(1, dtype=kiln.float32, device=device)
    y = x + x
    assert y.item() == 2.0

    def sync():
        (x + x).item()  # a sync point: lazily replayed work (tracer on) finishes here
        if device == "cuda":
            kiln.cuda.synchronize()

    mode = "tracer on" if os.environ.get("KILN_TRACE", "1") not in ("0", "off") else "eager"
    return (lambda: x + x), sync, f"kiln ({mode})"


def kiln_replay_case(device, body_ops):
    """A loop body of `body_ops` distinct tiny ops (+ * - on 1-element tensors, each its
    own site) and no host read: the tracer closes the loop at the body's first op,
    compiles it and from then on replays it lazily (each op returns a lazy tensor; the
    plan runs when the loop comes round). Per call of the returned fn: body_ops ops."""
    import kiln

    if device == "cuda" and not kiln.cuda.is_available():
        return None
    x = kiln.ones(1, dtype=kiln.float32, device=device)
    w = kiln.full((1,), 0.5, dtype=kiln.float32, device=device)
    body = body_fn(body_ops, "py_overhead")

    def sync():
        body(x, w).item()
        if device == "cuda":
            kiln.cuda.synchronize()

    def check():
        e = kiln.explain()
        return f"{e.ops_replayed} of {e.ops_replayed + e.ops_recorded} ops replayed"

    return (lambda: body(x, w)), sync, f"kiln (lazy replay, {body_ops}-op body)", check


def torch_case(device):
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return None
    torch.set_grad_enabled(False)
    x = torch.ones(1, dtype=torch.float32, device=device)
    assert (x + x).item() == 2.0
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return (lambda: x + x), sync, f"torch {torch.__version__}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["kiln", "torch", "both"], default="both")
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all",
                    help="'all': the CPU, and CUDA when the backend sees a GPU")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--body", type=int, nargs="*", default=[8, 32],
                    help="kiln: also time lazy replay of loop bodies of these many ops")
    args = ap.parse_args()

    backends = ["kiln", "torch"] if args.backend == "both" else [args.backend]
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    py = f"python {sys.version_info.major}.{sys.version_info.minor}"
    for backend in backends:
        for device in devices:
            try:
                case = (kiln_case if backend == "kiln" else torch_case)(device)
            except ImportError as e:
                print(f"py_overhead {backend:5s} {device:4s} skipped: {e}")
                continue
            if case is None:
                if args.device != "all":
                    print(f"py_overhead {backend:5s} {device:4s} skipped: no CUDA device")
                continue
            fn, sync, label = case
            calls = args.calls if device == "cpu" else min(args.calls, 20_000)
            median, best = measure(fn, sync, calls, args.repeats, warmup=max(1000, calls // 10))
            print(f"py_overhead {backend:5s} {device:4s} x + x (1 x float32): "
                  f"{median * 1e6:.3f} us/op  [median of {args.repeats} x {calls}; "
                  f"min {best * 1e6:.3f}; {label}; {py}]", flush=True)
            if backend != "kiln" or os.environ.get("KILN_TRACE", "1") in ("0", "off"):
                continue
            for ops in args.body:
                import kiln

                kiln.reset()
                fn, sync, label, check = kiln_replay_case(device, ops)
                n = max(1, calls // ops)
                median, best = measure(fn, sync, n, args.repeats, warmup=max(200, n // 10))
                print(f"py_overhead {backend:5s} {device:4s} {ops}-op body (1 x float32): "
                      f"{median * 1e6 / ops:.3f} us/op  [median of {args.repeats} x {n} bodies; "
                      f"min {best * 1e6 / ops:.3f}; {label}, {check()}; {py}]", flush=True)


if __name__ == "__main__":
    main()
