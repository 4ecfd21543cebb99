#!/usr/bin/env python3
"""A/B on the CPU: bench/cpu_workloads.py's hand-written attention traced with the JIT's
attention pass (one fused attention step, set_config(cpu_attention=True)) and without it
(two BLAS matmuls and a softmax kernel): 4 rounds alternating, each a fresh compile then
20 timed calls, every call read back to the host; prints the median of the rounds'
medians and the best call. Results: docs/results/attention_pass_cpu.txt.

    PYTHONPATH=build/python python3 bench/attention_pass_cpu_ab.py [2x8x256x64]
"""

import statistics
import sys
import time

import numpy as np

import kiln
import kiln.nn.functional as F


def attention(q, k, v):
    s = (q @ k.transpose(-2, -1)) / (q.size(-1) ** 0.5)
    return F.softmax(s, dim=-1) @ v


def measure(fused, q, k, v, calls=20):
    kiln.reset()
    kiln.set_config(cpu_attention=fused, background_compile=False)
    f = kiln.compile(attention)
    for _ in range(4):
        f(q, k, v).numpy()
    fused_notes = [n for t in kiln.explain().traces for n in t["notes"]
                   if "fused attention" in n]
    assert bool(fused_notes) == fused, str(kiln.explain())
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        f(q, k, v).numpy()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times), min(times)


def main():
    shape = tuple(int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "2x8x256x64").split("x"))
    rng = np.random.default_rng(0)
    q, k, v = (kiln.tensor(rng.standard_normal(shape).astype(np.float32)) for _ in range(3))
    rounds = {False: [], True: []}
    for _ in range(4):
        for fused in (False, True):
            rounds[fused].append(measure(fused, q, k, v))
    for fused in (False, True):
        medians = [m for m, _ in rounds[fused]]
        print(f"{'fused attention' if fused else 'composite':15}: "
              f"{statistics.median(medians):8.0f} us median, "
              f"best {min(b for _, b in rounds[fused]):8.0f} us, "
              f"rounds {[round(m) for m in medians]}")


if __name__ == "__main__":
    main()
