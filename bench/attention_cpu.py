#!/usr/bin/env python3
"""CPU attention at bench/cpu_workloads.py's attention size (2x8x256x64 float32):
kiln's F.scaled_dot_product_attention (whichever kiln PYTHONPATH holds: a build before
the fused op runs the composite) and PyTorch eager (the workloads row's formula,
softmax(q k^T / sqrt(E)) v), forward alone and forward + backward, eager calls in a
loop; 7 repeats, the median per call.

    PYTHONPATH=build/python python3 bench/attention_cpu.py [--causal]
"""

import argparse
import statistics
import time

import numpy as np


def per_call_us(fn, min_s=0.3):
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_s / 3:
        fn()
        n += 1
    reps = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        reps.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--torch", action="store_true", help="time PyTorch eager too")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 8, 256, 64)).astype(np.float32) for _ in range(3)]
    g = rng.standard_normal((2, 8, 256, 64)).astype(np.float32)

    import kiln
    import kiln.nn.functional as KF
    kq, kk, kv = (kiln.tensor(a) for a in arrays)
    fwd = per_call_us(lambda: KF.scaled_dot_product_attention(kq, kk, kv, is_causal=args.causal))
    kg = kiln.tensor(g)
    lq, lk, lv = (kiln.tensor(a, requires_grad=True) for a in arrays)

    def kiln_step():
        KF.scaled_dot_product_attention(lq, lk, lv, is_causal=args.causal).backward(kg)

    both = per_call_us(kiln_step)
    print(f"kiln ({kiln.__file__}): forward {fwd:8.1f} us   forward+backward {both:8.1f} us")
    if not args.torch:
        return
    import torch
    tq, tk, tv = (torch.from_numpy(a) for a in arrays)
    mask = torch.ones(256, 256, dtype=torch.bool).triu(1)

    def torch_attn(q, k, v):
        s = q @ k.transpose(-2, -1) / 8.0
        if args.causal:
            s = s.masked_fill(mask, float("-inf"))
        return torch.softmax(s, -1) @ v

    fwd = per_call_us(lambda: torch_attn(tq, tk, tv))
    lq, lk, lv = (torch.from_numpy(a).requires_grad_(True) for a in arrays)
    tg = torch.from_numpy(g)
    both = per_call_us(lambda: torch_attn(lq, lk, lv).backward(tg))
    print(f"torch {torch.__version__} eager: forward {fwd:8.1f} us   forward+backward {both:8.1f} us")


if __name__ == "__main__":
    main()
