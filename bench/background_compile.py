#!/usr/bin/env python3
"""Background compiles on the CPU (tracer/background_compile.h): the time of every
iteration of bench/models' training loops from the first, kiln traced with compiles in
the background (the default) against kiln eager, and today's synchronous compiles
(KILN_COMPILE_SYNC=1) for contrast. Issue 21's bound: no iteration takes more than 3x an
eager iteration while its trace compiles.

    PYTHONPATH=build/python python3 bench/background_compile.py [--only gpt,cnn,lstm]
        [--steps 20] [--device cpu|cuda] [--out docs/results/background_compile_cpu.txt]

Method: each (model, mode) runs in a new worker process (this script with --worker) with
an empty kernel cache (KILN_CACHE_DIR), so every compile is cold. A worker times each
step (case.step(), which reads the loss with item()) and, outside the timed part, asks
the tracer after each step how many compiles are in flight and how many plans replayed.
  eager ms/iter      median step of kiln eager (KILN_TRACE=0), steps 3 and on
  compiling          the steps from the first one that submitted a compile to the one
                     after which none was in flight (all plans swapped in)
  worst compiling    the slowest of those steps (background mode), and its ratio to eager
  swap-in            the first step that replayed a plan, and the step after which every
                     compile had finished
  sync worst         the slowest step with KILN_COMPILE_SYNC=1 (today's compile stall)
The machine is shared: the load average is printed with the table.
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
sys.path[:0] = [os.path.join(HERE, "models"), HERE]

TRAIN_MODELS = ("gpt", "cnn", "lstm")
MODES = ("eager", "background", "sync")


def worker(args):
    import compat
    import kiln

    compat.prepare(kiln)
    module = __import__(args.model)
    size = args.size or ("gpu" if args.device == "cuda" else "cpu")
    case = module.make(kiln, args.device, size)
    sync = kiln.cuda.synchronize if args.device == "cuda" else (lambda: None)
    traced = args.worker != "eager"
    rows = []
    start = time.monotonic()
    quiet = 0
    for i in range(args.steps_max):
        t0 = time.perf_counter()
        loss = case.step()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        row = dict(i=i, ms=ms, loss=loss)
        if traced:
            e = json.loads(kiln.explain().json())
            row.update(in_flight=kiln._C._compiles_in_flight(), traces=len(e["traces"]),
                       replays=sum(t["replays"] for t in e["traces"]),
                       recompiles=len(e["recompiles"]), eager_anchors=len(e["eager_anchors"]))
            quiet = quiet + 1 if row["in_flight"] == 0 and row["replays"] > 0 else 0
        rows.append(row)
        if i + 1 >= args.steps and (not traced or quiet >= 5):
            break
        if time.monotonic() - start > args.budget_s:
            break
    res = dict(model=args.model, mode=args.worker, rows=rows, value=case.check_value())
    if traced:
        res["compile_ms"] = json.loads(kiln.explain().json())["compile_ms"]
    print("RESULT " + json.dumps(res), flush=True)


def run_worker(model, mode, args):
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="kiln-bg-cache-")
    env["KILN_CACHE_DIR"] = cache
    env.pop("KILN_VERIFY", None)
    env.pop("KILN_COMPILE_SYNC", None)
    if mode == "eager":
        env["KILN_TRACE"] = "0"
    if mode == "sync":
        env["KILN_COMPILE_SYNC"] = "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--model", model,
           "--device", args.device, "--size", args.size, "--steps", str(args.steps),
           "--steps-max", str(args.steps_max),
           "--budget-s", str(args.budget_s)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                           timeout=args.budget_s + 300)
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        out, err = "", "timeout"
    subprocess.run(["rm", "-rf", cache])
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return dict(model=model, mode=mode, error=tail[:300])


def compiling_span(rows):
    """(first, last): the steps from the first that left a compile in flight to the one
    after which none was (or the first replay, whichever is later); None if none."""
    first = next((r["i"] for r in rows if r.get("in_flight", 0) > 0), None)
    if first is None:
        return None
    last = first
    for r in rows[first:]:
        last = r["i"]
        if r["in_flight"] == 0 and r["replays"] > 0:
            break
    return first, last


def summarize(model, res):
    eager, bg, sync = res["eager"], res["background"], res["sync"]
    out = dict(model=model)
    for mode in MODES:
        if "error" in res[mode]:
            out["error"] = f"{mode}: {res[mode]['error']}"
            return out
    eager_ms = statistics.median(r["ms"] for r in eager["rows"][3:] or eager["rows"])
    out["eager_ms"] = eager_ms
    span = compiling_span(bg["rows"])
    if span:
        first, last = span
        worst = max(bg["rows"][first:last + 1], key=lambda r: r["ms"])
        out.update(compiling=f"{first}-{last}", worst_ms=worst["ms"], worst_at=worst["i"],
                   ratio=worst["ms"] / eager_ms)
    out["first_replay"] = next((r["i"] for r in bg["rows"] if r["replays"] > 0), None)
    out["all_in"] = span[1] if span else None
    steady = [r["ms"] for r in bg["rows"][-5:]]
    out["traced_ms"] = statistics.median(steady)
    sync_rows = sync["rows"]
    worst_sync = max(sync_rows[1:] or sync_rows, key=lambda r: r["ms"])
    out.update(sync_worst_ms=worst_sync["ms"], sync_worst_at=worst_sync["i"],
               sync_ratio=worst_sync["ms"] / eager_ms)
    out["first_ms"] = {m: res[m]["rows"][0]["ms"] for m in MODES}
    out["steps"] = len(bg["rows"])
    out["recompiles"] = bg["rows"][-1]["recompiles"]
    out["eager_anchors"] = bg["rows"][-1]["eager_anchors"]
    out["compile_ms"] = bg.get("compile_ms")
    out["values"] = {m: res[m]["value"] for m in MODES}
    # Rule 1: each step's loss against eager's, step by step (same weights, batches, seeds).
    n = min(len(res[m]["rows"]) for m in MODES)
    out["loss_rel"] = {m: max(abs(res[m]["rows"][i]["loss"] - eager["rows"][i]["loss"])
                              / max(abs(eager["rows"][i]["loss"]), 1e-12) for i in range(n))
                       for m in ("background", "sync")}
    out["loss_steps"] = n
    out["series"] = {m: [round(r["ms"], 1) for r in res[m]["rows"]] for m in MODES}
    out["in_flight"] = [r["in_flight"] for r in bg["rows"]]
    return out


DEVICE = "the CPU"


def table(summaries, load_before, load_after):
    lines = [
        f"Background compile, bench/models training loops on {DEVICE} "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores)",
        f"load average before: {load_before}; after: {load_after}",
        "",
        "| model | eager ms/iter | worst iter while compiling (bg) ms | ratio | at iter | "
        "compiling iters | first replay at iter | all plans in after iter | traced ms/iter "
        "(last 5) | sync worst iter ms | sync ratio | compile ms in all |",
        "|" + "---|" * 12,
    ]
    for s in summaries:
        if "error" in s:
            lines.append(f"| {s['model']} | error: {s['error']} |" + " |" * 10)
            continue
        lines.append(
            f"| {s['model']} | {s['eager_ms']:.1f} | {s.get('worst_ms', float('nan')):.1f} | "
            f"{s.get('ratio', float('nan')):.2f}x | {s.get('worst_at', '-')} | "
            f"{s.get('compiling', '-')} | {s['first_replay']} | {s['all_in']} | "
            f"{s['traced_ms']:.1f} | {s['sync_worst_ms']:.1f} (iter {s['sync_worst_at']}) | "
            f"{s['sync_ratio']:.2f}x | {s['compile_ms']:.0f} |")
    lines.append("")
    for s in summaries:
        if "error" in s:
            continue
        lines.append(f"- {s['model']}: first iteration ms (recording / eager): "
                     + ", ".join(f"{m} {v:.1f}" for m, v in s["first_ms"].items())
                     + f"; {s['steps']} traced iterations; recompiles {s['recompiles']}; "
                     f"anchors left eager {s['eager_anchors']}; loss of every step against "
                     f"eager's over the first {s['loss_steps']} steps, largest relative "
                     "difference: " + ", ".join(f"{m} {v:.1e}" for m, v in s["loss_rel"].items()))
    lines.append("")
    lines.append("Every iteration's ms from the first (bg: compiles in flight after it, "
                 "'|' before the first replay):")
    for s in summaries:
        if "error" in s:
            continue
        for m in MODES:
            cells = [f"{v:g}" for v in s["series"][m]]
            if m == "background":
                cells = [f"{c}({n})" if n else c for c, n in zip(cells, s["in_flight"])]
                if s["first_replay"] is not None:
                    cells.insert(s["first_replay"], "|")
            lines.append(f"  {s['model']} {m}: " + " ".join(cells))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(TRAIN_MODELS))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--size", default="", help="cpu or gpu (default: the device's)")
    ap.add_argument("--steps", type=int, default=20, help="at least this many iterations")
    ap.add_argument("--steps-max", type=int, default=200)
    ap.add_argument("--budget-s", type=float, default=240.0, help="per worker")
    ap.add_argument("--out", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", choices=MODES)
    ap.add_argument("--model")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    global DEVICE
    DEVICE = "the CPU" if args.device == "cpu" else "CUDA"
    load_before = " ".join(open("/proc/loadavg").read().split()[:3])
    summaries, raw = [], {}
    for model in args.only.split(","):
        res = {mode: run_worker(model, mode, args) for mode in MODES}
        raw[model] = res
        summaries.append(summarize(model, res))
        print(json.dumps(summaries[-1]), flush=True)
    load_after = " ".join(open("/proc/loadavg").read().split()[:3])
    text = table(summaries, load_before, load_after)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f)


if __name__ == "__main__":
    main()
