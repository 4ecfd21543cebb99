#!/usr/bin/env python3
"""Symbolic sizes (tracer/symbolic_shapes.h, issue 21): loops whose shapes change every
iteration, kiln traced against kiln eager on the same inputs in the same process.

    PYTHONPATH=build/python /usr/bin/python3 bench/dynamic_shapes.py [--only mlp,block,gen]
        [--epochs 2] [--tokens 100]

Cases:
  mlp    x @ w1 + b1 -> relu -> @ w2 + b2 (784 -> 256 -> 10), batch sizes 1..64 in a
         random order, every epoch a new order; the output read on the host each step
  block  a pre-LayerNorm GELU MLP block with a residual (bench/models' GPT block without
         its attention, whose view(B, T, H, D) takes sizes as attributes: not symbolic
         yet), x of [B, 32, 128], B in 1..64 in a random order
  gen    generation of `--tokens` tokens with a growing sequence: embedding of the whole
         sequence, a tanh layer, the mean over the sequence, logits, top-k sampling with
         the boolean mask `logits[logits < v[:, [-1]]] = -inf`, softmax, multinomial, and
         the new token appended (cat) for the next step
  kv     a decoder step with a KV cache written at a moving position
         (`cache[:, pos:pos + 1] = k`) and attention over `cache[:, :pos + 1]`: the
         slices' bounds are index symbols of one trace (symbolic bounds, tracer.md),
         bound per position like a new size
Printed per case: recompiles (variants after the first compile of a trace: a 0/1
specialisation counts), compiled traces, plans bound to new sizes or bounds without a
recompile,
replays, iterations that replayed, and the median time per iteration from iteration 10
on, traced and eager, with the total. KILN_VERIFY=1 in the environment checks every
replay against eager. The machine load is printed first (a shared machine).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import kiln


def mlp_case(rng, epochs):
    d_in, hidden, d_out = 784, 256, 10
    w1 = kiln.from_numpy((rng.standard_normal((d_in, hidden)) * 0.05).astype(np.float32))
    b1 = kiln.from_numpy(np.zeros(hidden, np.float32))
    w2 = kiln.from_numpy((rng.standard_normal((hidden, d_out)) * 0.05).astype(np.float32))
    b2 = kiln.from_numpy(np.zeros(d_out, np.float32))
    sizes = [int(n) for _ in range(epochs) for n in rng.permutation(np.arange(1, 65))]
    inputs = [kiln.from_numpy(rng.standard_normal((n, d_in)).astype(np.float32)) for n in sizes]

    def step(i):
        return (kiln.relu(inputs[i] @ w1 + b1) @ w2 + b2).numpy()

    return step, len(inputs)


def block_case(rng, epochs):
    c, t = 128, 32
    ln = kiln.nn.LayerNorm(c)
    fc = kiln.nn.Linear(c, 4 * c)
    proj = kiln.nn.Linear(4 * c, c)
    sizes = [int(n) for _ in range(epochs) for n in rng.permutation(np.arange(1, 65))]
    inputs = [kiln.from_numpy(rng.standard_normal((n, t, c)).astype(np.float32)) for n in sizes]

    def step(i):
        with kiln.no_grad():
            x = inputs[i]
            y = x + proj(kiln.nn.functional.gelu(fc(ln(x))))
            return y[:, -1, :].numpy()

    return step, len(inputs)


def gen_case(rng, tokens):
    vocab, c, k, batch = 96, 64, 8, 4
    emb = kiln.from_numpy((rng.standard_normal((vocab, c)) * 0.5).astype(np.float32))
    w = kiln.from_numpy((rng.standard_normal((c, c)) * 0.2).astype(np.float32))
    out = kiln.from_numpy((rng.standard_normal((c, vocab)) * 0.5).astype(np.float32))
    start = kiln.from_numpy(rng.integers(0, vocab, (batch, 4)).astype(np.int64))
    state = {}

    def step(i):
        if i == 0:
            kiln.manual_seed(1234)
            state["seq"] = start
        seq = state["seq"]
        h = kiln.tanh(kiln.nn.functional.embedding(seq, emb) @ w)
        logits = h.mean(1) @ out
        v, _ = kiln.topk(logits, k)
        logits[logits < v[:, [-1]]] = -float("inf")
        probs = kiln.softmax(logits, -1)
        nxt = kiln.multinomial(probs, 1)
        state["seq"] = kiln.cat([seq, nxt], 1)
        return state["seq"].numpy()

    return step, tokens


def kv_case(rng, tokens):
    c, batch = 64, 4
    wq, wk, wv = (kiln.from_numpy((rng.standard_normal((c, c)) * 0.2).astype(np.float32))
                  for _ in range(3))
    x0 = kiln.from_numpy(rng.standard_normal((batch, 1, c)).astype(np.float32))
    state = {}

    def step(pos):
        if pos == 0:
            state["k"] = kiln.zeros((batch, tokens, c))
            state["v"] = kiln.zeros((batch, tokens, c))
            state["x"] = x0
        x = state["x"]
        state["k"][:, pos:pos + 1] = x @ wk  # the KV-cache write at a moving position
        state["v"][:, pos:pos + 1] = x @ wv
        keys, values = state["k"][:, :pos + 1], state["v"][:, :pos + 1]
        att = kiln.softmax((x @ wq) @ keys.transpose(1, 2) * (1.0 / c ** 0.5), -1)
        state["x"] = kiln.tanh(att @ values)
        return state["x"].numpy()

    return step, tokens


CASES = {"mlp": mlp_case, "block": block_case, "gen": gen_case, "kv": kv_case}


def run(make, arg, traced):
    kiln.reset()
    # On by default; KILN_SYMBOLIC_SHAPES=0 in the environment compares.
    kiln.set_config(symbolic_shapes=os.environ.get("KILN_SYMBOLIC_SHAPES", "1") != "0")
    kiln.set_tracing(traced)
    rng = np.random.default_rng(0)
    kiln.manual_seed(0)
    step, n = make(rng, arg)
    times, outs, replayed = [], [], 0
    for i in range(n):
        before = kiln.explain().ops_replayed if traced else 0
        start = time.perf_counter()
        outs.append(step(i))
        times.append(time.perf_counter() - start)
        if traced and kiln.explain().ops_replayed > before:
            replayed += 1
    report = kiln.explain() if traced else None
    kiln.set_tracing(True)
    return times, outs, report, replayed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="mlp,block,gen,kv")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"({os.cpu_count()} cores); KILN_VERIFY={os.environ.get('KILN_VERIFY', '0')}")
    print(f"{'case':6} {'iters':>5} {'recompiles':>10} {'traces':>6} {'bound':>5} "
          f"{'replays':>7} {'replayed_iters':>14} {'traced_ms':>9} {'eager_ms':>8} "
          f"{'traced_total_s':>14} {'eager_total_s':>13}")
    for name in args.only.split(","):
        arg = args.tokens if name in ("gen", "kv") else args.epochs
        t_times, t_outs, report, replayed = run(CASES[name], arg, True)
        e_times, e_outs, _, _ = run(CASES[name], arg, False)
        for a, b in zip(t_outs, e_outs):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        bound = sum(tr.get("size_bindings", 0) for tr in report.traces)
        replays = sum(tr["replays"] for tr in report.traces)
        med = lambda ts: statistics.median(ts[10:]) * 1e3  # noqa: E731
        print(f"{name:6} {len(t_times):5d} {len(report.recompiles):10d} {len(report.traces):6d} "
              f"{bound:5d} {replays:7d} {replayed:14d} {med(t_times):9.3f} {med(e_times):8.3f} "
              f"{sum(t_times):14.3f} {sum(e_times):13.3f}")
        if os.environ.get("DYNAMIC_SHAPES_EXPLAIN"):
            print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
