#!/usr/bin/env python3
"""Process CPU time per call of bench/cpu_workloads.py's matmul rows (mlp3, lstm_cell,
attention) for kiln eager, kiln traced (--systems kiln_traced: automatic tracing, timed
after the trace has compiled) and PyTorch eager, one thread each, in this process.

On a shared, overloaded machine wall-clock figures swing by several times between runs;
the CPU time a single-threaded call consumes does not depend on how the scheduler
slices the cores, so it compares the work each system does per call (it says nothing
about 2-thread scaling: cpu_workloads.py and ab_builds.py measure that). Run it once
per kiln build (PYTHONPATH picks the build), alternating builds, and compare.

    PYTHONPATH=build/python KILN_NUM_THREADS=1 /usr/bin/python3 bench/cpu_time_rows.py
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_workloads  # noqa: E402
import workload_cases  # noqa: E402


def per_call_cpu_s(fn, args, loops, repeats):
    for _ in range(3):
        fn(*args)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(loops):
            fn(*args)
        best = min(best, (time.process_time() - t0) / loops)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="mlp3,lstm_cell,attention")
    p.add_argument("--systems", default="kiln,torch")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--target-s", type=float, default=0.05, help="CPU seconds per timed loop")
    p.add_argument("--warmup-s", type=float, default=3.0,
                   help="kiln_traced: seconds of calls before timing (the compile)")
    args = p.parse_args()
    rows = [r for r in workload_cases.cases(False, [], 1 << 10, (2, 8, 256, 64))
            if r[0] in args.rows.split(",")]
    rng = np.random.default_rng(0)
    for name, size, shapes, _ in rows:
        inputs = cpu_workloads.make_inputs(shapes, rng)
        for system in args.systems.split(","):
            if system in ("kiln", "kiln_traced"):
                import kiln
                kiln.set_tracing(system == "kiln_traced")  # kiln: eager, as cpu_workloads'
                body = cpu_workloads.torch_like(kiln)[name]

                def fn(*a, body=body):
                    for o in cpu_workloads.as_list(body(*a)):
                        o.data_ptr()  # a memory read runs any pending (lazy) work
                xs = [kiln.tensor(a) for a in inputs]
            else:
                import torch
                torch.set_num_threads(1)
                fn = cpu_workloads.torch_like(torch)[name]
                xs = [torch.from_numpy(a) for a in inputs]
            if system == "kiln_traced":  # until the background compile is in and replays
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < args.warmup_s:
                    fn(*xs)
            once = per_call_cpu_s(fn, xs, 1, 1)
            loops = max(1, int(args.target_s / max(once, 1e-6)))
            us = per_call_cpu_s(fn, xs, loops, args.repeats) * 1e6
            print(f"{name:10s} {size:12s} {system:6s} {us:10.1f} us CPU per call", flush=True)


if __name__ == "__main__":
    main()
