#!/usr/bin/env python3
"""Warm starts on the CPU (tracer/warm_start.h): a cold process (empty KILN_CACHE_DIR)
against a warm one (the cache the cold one left), each a new process running the same
training loop: the time of each of the first iterations, the iteration from which the
loop replays compiled traces, and the time to the end of the first compiled iteration.

    PYTHONPATH=build/python python3 bench/warm_start.py [--only demo,gpt,cnn,lstm]
        [--iterations 10] [--out docs/results/warm_start_cpu.txt]

Workloads: `demo`, the loop of examples/demo.py (the README's first command: an MLP and
a transformer block, CPU sizes, the loss read every 10 iterations), and bench/models'
training loops (gpt, cnn, lstm: each step reads its loss with item()). Method: per
workload a fresh cache directory; the cold worker runs, then the warm worker, then the
eager worker (KILN_TRACE=0) for the steady-state reference. Each worker times its first
`--iterations` iterations, runs on until no compile is in flight and plans replay for 5
iterations (the cold process stores its traces as they are installed), then times 10
more (the steady state: their median, timed from iteration --settle at the earliest; the demo's iterations that print the loss are left
out of it, as examples/demo.py's report does). It asks the tracer after each iteration
(outside the timed part) whether it recorded ops and whether compiled traces replayed.
The demo's step keeps its result alive until the next step, as the demo's loop variable
does (a result nobody holds is not computed).
  first compiled iter   the first iteration that recorded nothing and replayed
  to first compiled ms  wall time from the loop's start to the end of that iteration
  within 1.25x steady   the first iteration from which every later one of the first
                        ones is within 1.25x of the steady-state median (warm: the done
                        criterion asks for it within the first 3)
Defaults otherwise (background compiles on). The machine is shared: the load average is
printed with the table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(HERE, "models"), HERE, os.path.join(ROOT, "examples")]

WORKLOADS = ("demo", "gpt", "cnn", "lstm")
STEADY = 10


def demo_step(kiln):
    import demo

    kiln.manual_seed(0)
    mlp, block = demo.MLP(256, 512, 10), demo.Block(128, 4)
    x, target = kiln.randn(64, 256), kiln.randn(64, 10)
    tokens = kiln.randn(4, 64, 128)
    state = {"i": 0}

    def step():
        i = state["i"]
        state["i"] += 1
        logits = mlp(x)
        loss = ((logits - target) ** 2).mean()
        if (i + 1) % 10 == 0:
            loss.item()
        h = block(tokens)
        total = loss + (h * h).mean()
        return total  # timed as examples/demo.py does: a replay runs as the loop comes round

    return step


def worker(args):
    t_start = time.perf_counter()
    import kiln

    import_ms = (time.perf_counter() - t_start) * 1e3
    if args.model == "demo":
        step = demo_step(kiln)
    else:
        import compat

        compat.prepare(kiln)
        case = __import__(args.model).make(kiln, "cpu", "cpu")
        step = case.step
    traced = args.worker != "eager"
    rows, waiting, keep = [], [], None
    loop_start = time.perf_counter()

    def timed(i):
        nonlocal loop_start, keep
        before = kiln.explain() if traced else None
        t0 = time.perf_counter()
        keep = step()  # held until the next step, as a loop's variables are
        t1 = time.perf_counter()
        row = dict(i=i, ms=(t1 - t0) * 1e3, since_start_ms=(t1 - loop_start) * 1e3,
                   prints=args.model == "demo" and (i + 1) % 10 == 0)
        if traced:
            after = kiln.explain()
            row.update(recorded=after.ops_recorded - before.ops_recorded,
                       replayed=after.ops_replayed - before.ops_replayed)
            loop_start += time.perf_counter() - t1  # the explain() calls are not the loop's
        return row

    for i in range(args.iterations):
        rows.append(timed(i))
    # Until the compiles are in (cold: the traces are stored when installed), then the
    # steady state.
    i, quiet, deadline = args.iterations, 0, time.monotonic() + args.budget_s
    while (i < args.settle or (traced and quiet < 5)) and time.monotonic() < deadline:
        r = timed(i)
        waiting.append(r)
        i += 1
        if traced:
            quiet = quiet + 1 if kiln._C._compiles_in_flight() == 0 and r["replayed"] > 0 else 0
    for _ in range(STEADY):
        rows.append(timed(i))
        i += 1
    if traced:
        kiln.synchronize_compiles()
        timed(i)
    res = dict(model=args.model, mode=args.worker, rows=rows, waiting=waiting,
               import_ms=import_ms)
    if traced:
        ex = kiln.explain()
        res.update(loaded=ex.stored_loaded, refused=ex.stored_refused, traces=len(ex.traces),
                   compile_ms=ex.compile_ms)
    print("RESULT " + json.dumps(res), flush=True)


def run_worker(model, mode, cache, args):
    env = dict(os.environ)
    env["KILN_CACHE_DIR"] = cache
    for k in ("KILN_VERIFY", "KILN_COMPILE_SYNC", "KILN_WARM_START", "KILN_TRACE"):
        env.pop(k, None)
    if mode == "eager":
        env["KILN_TRACE"] = "0"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--model", model,
           "--iterations", str(args.iterations), "--budget-s", str(args.budget_s), "--settle", str(args.settle)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return dict(model=model, mode=mode, error=(p.stderr.strip().splitlines() or ["?"])[-1])


def summarize(res, n):
    rows = res["rows"]
    # The last STEADY iterations (the demo's: but the one that prints, as demo.py's report)
    steady = statistics.median(r["ms"] for r in rows[n:] if not r.get("prints"))
    ordered = rows[:n] + res.get("waiting", []) + rows[n:]
    first = next((r for r in ordered if r.get("recorded") == 0 and r.get("replayed", 0) > 0),
                 None)
    within = None
    for k in range(n):
        if all(r["ms"] <= 1.25 * steady for r in rows[k:n] if not r.get("prints")):
            within = k
            break
    return dict(steady=steady, first=first["i"] if first else None,
                to_first=first["since_start_ms"] if first else None, within=within,
                series=[r["ms"] for r in rows[:n]])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", default=None)
    p.add_argument("--model", default="demo")
    p.add_argument("--only", default=",".join(WORKLOADS))
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--out", default=None)
    p.add_argument("--settle", type=int, default=0,
                   help="iterations run before the steady state is timed (at least)")
    p.add_argument("--budget-s", type=float, default=300,
                   help="at most this long per worker waiting for its compiles")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    load_before = os.getloadavg()
    lines = [f"Warm start on the CPU ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} cores), first {args.iterations} iterations of a new process",
             "",
             "| workload | process | first compiled iter | to first compiled ms | "
             "steady ms/iter | within 1.25x steady from iter | traces loaded | compile ms |",
             "|---|---|---|---|---|---|---|---|"]
    series = []
    for model in args.only.split(","):
        cache = tempfile.mkdtemp(prefix="kiln-warm-")
        results = {m: run_worker(model, m, cache, args) for m in ("cold", "warm", "eager")}
        subprocess.run(["rm", "-rf", cache])
        for mode, res in results.items():
            if "error" in res:
                lines.append(f"| {model} | {mode} | error: {res['error'][:200]} |||||")
                continue
            s = summarize(res, args.iterations)
            to_first = f"{s['to_first']:.0f}" if s["to_first"] is not None else "-"
            lines.append(f"| {model} | {mode} | {s['first'] if s['first'] is not None else '-'} "
                         f"| {to_first} | {s['steady']:.2f} | {s['within']} | "
                         f"{res.get('loaded', '-')} | "
                         f"{res['compile_ms']:.0f} |" if mode != "eager" else
                         f"| {model} | {mode} | - | - | {s['steady']:.2f} | {s['within']} | - | - |")
            series.append(f"- {model} {mode}: " + ", ".join(f"{v:.1f}" for v in s["series"]))
    lines += ["", f"ms per iteration, iterations 0..{args.iterations - 1}:"] + series
    lines += ["", f"load average before: {load_before}; after: {os.getloadavg()}"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
