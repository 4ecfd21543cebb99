#!/usr/bin/env python3
"""Python per-op overhead of a tiny op: `x + x` on a 1-element float32 tensor, kiln vs
PyTorch eager, measured the same way (BENCHMARKS.md): N calls in a loop, divided by N,
7 repeats, the median; a warmup first. On CUDA the device is synchronized after each
repeat's loop (the figure is host time per op while the GPU keeps up).

    PYTHONPATH=build/python /usr/bin/python3 bench/py_overhead.py        # kiln and torch
    ... bench/py_overhead.py --backend kiln --device cuda --calls 20000

One line per system and device, e.g.
    py_overhead kiln  cpu  x + x (1 x float32): 0.712 us/op  [median of 7 x 100000; min 0.70]
With kiln's tracer on (the default) a long loop of `x + x` becomes a hot trace that
replays lazily; KILN_TRACE=0 measures plain eager dispatch.
"""

import argparse
import os
import statistics
import sys
import time


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


if __name__ == "__main__":
    main()
