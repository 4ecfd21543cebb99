#!/usr/bin/env python3
"""GPU workloads, all systems side by side in one run: kiln eager (tracing off), kiln
traced (``kiln.compile``: warmup, CUDA JIT, graph replay), PyTorch eager,
``torch.compile`` (inductor) and ``torch.compile(mode="reduce-overhead")``, against the
floor (bytes over the device-to-device copy bandwidth measured in this run, flops over
the measured matmul rate, or one CUDA graph launch, whichever is larger).

Method (shared/BENCHMARKS.md, as the anchors in shared/reference/torch_workloads.py):
float32, TF32 off; the same random inputs for every system; a float64 eager reference
(PyTorch on the device, else numpy); each system's result is checked against it
(relative L2 error, --tol) after its warmup and before timing; per-call time = N calls
in a loop, synchronize, divide by N (N sized so a loop takes about --target-ms); 7
repeats, the median. The workload functions are bench/cpu_workloads.py's, run on CUDA
tensors.

kiln's Python module is built for Debian's Python 3.11 while PyTorch lives in the
machine's python3, so each system runs in its own worker process (this script with
--worker), kiln's under --kiln-python (a command that imports kiln; env KILN_PYTHON,
default this interpreter), PyTorch's under --torch-python (default this interpreter).
A worker that dies is restarted after the workload it died in; a system that fails on a
workload gets "error: <first line>" in that cell and the run goes on.

    python3 bench/gpu_workloads.py --kiln-python /tmp/kilndeb/kiln-python3.11 --json w.json
    python3 bench/gpu_workloads.py --quick --only softmax,mlp3 --systems kiln_traced,torch_compile
    python3 bench/gpu_workloads.py --dry-run      # what would run; says so if no GPU is seen

On the lent GPU machine scripts/gpu_run.sh runs it (the interpreter wrapper is made
there). First calls: kiln traced cold (an empty KILN_CACHE_DIR, a fresh temp dir) and
warm (a new process with that cache filled), and torch.compile's first call (cold
inductor and Triton caches unless TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR are set).
"""

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import LABELS, SYSTEMS, cases  # noqa: E402  (numpy-free)
from gpu_report import cell_notes, device_line, first_call_table, main_table  # noqa: E402
from gpu_runner import Runner, stop_workers  # noqa: E402
from gpu_workers import prepare, probe, worker  # noqa: E402  (numpy only in the workers)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--quick", action="store_true",
                   help="small sizes only (no 2^26, 4096-batch mlp3 or full attention), "
                   "3 repeats, short loops: about a minute")
    p.add_argument("--only", default="", help="comma list of workloads (add_relu_mul, gelu_tanh, "
                   "sin_cos, softmax, layernorm, mlp3, lstm_cell, attention)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma list of {', '.join(SYSTEMS)} (default: all)")
    p.add_argument("--json", default="", help="write every figure (and the tables) to this file")
    p.add_argument("--kiln-python", default=os.environ.get("KILN_PYTHON", sys.executable),
                   help="command that runs a Python which imports kiln (a path, or a command "
                   "line split on spaces; env KILN_PYTHON; default: this interpreter)")
    p.add_argument("--torch-python", default=sys.executable,
                   help="Python with PyTorch for the torch workers (default: this interpreter)")
    p.add_argument("--budget", type=float, default=330.0, metavar="S",
                   help="wall-clock budget of the whole run; workers still running at its end "
                   "are stopped and their cells marked (default 330)")
    p.add_argument("--system-limit", type=float, default=150.0, metavar="S",
                   help="most seconds one system's workers may take (default 150)")
    p.add_argument("--repeats", type=int, default=None, help="timed loops per cell (default 7)")
    p.add_argument("--target-ms", type=float, default=None,
                   help="length of one timed loop (default 50; quick 20)")
    p.add_argument("--warmup", type=int, default=5, help="calls between the first calls and the "
                   "checked call (kiln traced compiles after 2, torch's reduce-overhead records "
                   "its graph after 1)")
    p.add_argument("--tol", type=float, default=1e-4, help="max relative L2 error (default 1e-4)")
    p.add_argument("--dry-run", action="store_true",
                   help="probe the interpreters and the GPU, print the plan, measure nothing")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--rows", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--limits", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.target_ms = args.target_ms or (20.0 if args.quick else 50.0)
    if args.worker in ("probe_kiln", "probe_torch"):
        return probe(args)
    if args.worker == "prepare":
        return prepare(args)
    if args.worker:
        return worker(args)

    names = [s for s in args.systems.split(",") if s]
    bad = [s for s in names if s not in SYSTEMS]
    if bad:
        p.error(f"unknown systems {bad}; choose among {', '.join(SYSTEMS)}")
    known = {c[0] for c in cases(False)}
    only = [w for w in args.only.split(",") if w]
    if set(only) - known:
        p.error(f"--only takes workloads among {sorted(known)}")
    args.kiln_python = (args.kiln_python.split() if not os.path.exists(args.kiln_python)
                        else [args.kiln_python])
    args.torch_python = [args.torch_python]
    all_cases = cases(args.quick)
    indices = [i for i, c in enumerate(all_cases) if not only or c[0] in only]
    mode = "quick" if args.quick else "full"

    tmp = tempfile.mkdtemp(prefix="kiln-gpu-bench-")
    signal.signal(signal.SIGTERM, stop_workers)
    signal.signal(signal.SIGINT, stop_workers)
    try:
        return run(args, names, indices, all_cases, mode, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, names, indices, all_cases, mode, tmp):
    runner = Runner(args, tmp)
    want_kiln = any(n.startswith("kiln") for n in names)
    want_torch = any(n.startswith("torch") for n in names)
    probes = {}
    if want_kiln:
        probes["kiln"] = runner.probe("probe_kiln")
    probes["torch"] = runner.probe("probe_torch")  # also the reference's device
    devices = {}
    for lib, info in probes.items():
        if "error" in info:
            devices[lib] = f"{lib} not usable: {info['error']}"
        elif args.device == "cpu":
            devices[lib] = f"{lib} {info['version']} on the CPU (--device cpu)"
        elif info.get("cuda"):
            devices[lib] = f"{lib} {info['version']}: {info['device_name']}"
        else:
            devices[lib] = f"{lib} {info['version']}: no CUDA device visible"
    print(f"gpu_workloads ({mode} run): {device_line(probes, args.device)}")
    for lib in probes:
        print(f"- {devices[lib]} (python {probes[lib].get('python', '?')})")
    sys.stdout.flush()
    gpu_seen = args.device == "cpu" or any(i.get("cuda") for i in probes.values())
    if not gpu_seen:
        print("\nno CUDA GPU visible to " + " or ".join(probes) + ": nothing to measure here "
              "(run it on the GPU machine: bash scripts/gpu_run.sh)")
        return 0 if args.dry_run else 3
    plan = [n for n in names]
    if "kiln_traced" in names:
        plan.insert(plan.index("kiln_traced") + 1, "kiln_warm")
    if args.dry_run:
        print(f"\nwould run {len(indices)} workloads "
              f"({', '.join(all_cases[i][0] + ' ' + all_cases[i][1] for i in indices)})")
        for n in plan:
            print(f"- {LABELS[n]}: {' '.join(runner.interpreter(n))}")
        return 0

    # ---- inputs and reference, then each system in its own worker
    interps = [args.torch_python] + ([args.kiln_python] if want_kiln else [])
    if "error" in probes["torch"] and want_kiln:
        interps.reverse()
    t0 = time.perf_counter()
    manifest = runner.prepare(interps, indices)
    print(f"- inputs and reference ({manifest['reference']}): "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    results, metas, notes = {}, {}, []
    for name in plan:
        if not want_torch and name.startswith("torch"):
            continue
        lib = "kiln" if name.startswith("kiln") else "torch"
        if "error" in probes.get(lib, {}):
            notes.append(f"{LABELS[name]} skipped: {probes[lib]['error']}")
            continue
        if runner.left() < 10:
            notes.append(f"{LABELS[name]} not run: the time budget (--budget) was spent")
            continue
        t0 = time.perf_counter()
        print(f"=== {LABELS[name]} ({' '.join(runner.interpreter(name))})", file=sys.stderr,
              flush=True)
        meta, res = runner.run_system(name, indices, args.system_limit)
        if "skipped" in meta:
            notes.append(f"{LABELS[name]} skipped: {meta['skipped']}")
            continue
        meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
        metas[name], results[name] = meta, res
    names = [n for n in plan if n in results]
    timed = [n for n in names if n != "kiln_warm"]
    if not timed:
        print("\nno system could be measured:\n" + "\n".join(f"- {n}" for n in notes))
        return 1

    limits = {}
    for n, m in metas.items():
        for key, value in m.get("limits", {}).items():
            limits.setdefault(key, {})[n] = value
    bw = max(limits.get("copy_GBps", {}).values(), default=math.inf) * 1e9
    rate = max(limits.get("matmul_GFLOPs", {}).values(), default=math.inf) * 1e9
    launch = min(limits.get("graph_launch_us", {}).values(), default=0.0)
    rows = []
    for i in indices:
        m = manifest["rows"][str(i)]
        bounds = {"bandwidth": m["bytes"] / bw * 1e6, "flops": m["flops"] / rate * 1e6,
                  "launch": launch}
        floor_by = max(bounds, key=bounds.get)
        rows.append(dict(workload=m["workload"], size=m["size"], bytes=m["bytes"],
                         flops=m["flops"], floor_us=round(bounds[floor_by], 3),
                         floor_by=floor_by if bounds[floor_by] else None,
                         results={n: results[n].get(i, dict(error="no result")) for n in names}))
    for r in rows:
        for n, res in r["results"].items():
            if "us" in res and r["floor_us"]:
                res["pct_floor"] = round(100 * r["floor_us"] / res["us"], 1)
    elapsed = time.perf_counter() - runner.start

    base = "kiln_traced" if "kiln_traced" in timed else timed[0]
    out = [f"# kiln GPU workloads ({mode} run, each system in its own process)", ""]
    out.append(device_line(probes, args.device))
    for n in names:
        m = metas[n]
        start = (f"; compiler start {m['compiler_start_s']:.2f} s" if "compiler_start_s" in m
                 else f"; compiler start failed: {m['compiler_start_error']}"
                 if "compiler_start_error" in m else "")
        out.append(f"- {LABELS[n]}: {m['version']} (worker {m['elapsed_s']} s{start})")
    out += [f"- {n}" for n in notes]
    out.append(f"- inputs and reference: {manifest['reference']}")
    for key, what in (("copy_GBps", "device-to-device copy GB/s (read + write)"),
                      ("matmul_GFLOPs", "float32 matmul GFLOP/s (TF32 off)"),
                      ("graph_launch_us", "one-kernel CUDA graph replay from Python, us"),
                      ("tiny_op_us", "tiny eager op from Python, us")):
        if key in limits:
            out.append(f"- {what}: " + ", ".join(f"{LABELS[n]} {v:g}" for n, v in
                                                  limits[key].items()))
    tables = [out[0], "", out[2], "", main_table(rows, timed), "",
              f"us per call, median of {args.repeats}; (Nx) = time / {LABELS[base]}; % floor = "
              f"floor / {LABELS[base]}; the full report with its notes: the run's output"]
    out += ["", tables[4], ""]
    out.append(f"us per call: N calls, synchronize, divide; median of {args.repeats}. (Nx) = "
               f"that system's time / {LABELS[base]} (>1: {LABELS[base]} is faster). floor = "
               "max(bytes in+out / best copy bandwidth, flops / best matmul rate, one graph "
               f"launch); % floor = floor / {LABELS[base]}. kernels: per call, from "
               "kiln.explain() (cuBLAS calls count); backend: the traces' backend there. "
               f"Every result was checked against the float64 reference first (rel L2 <= "
               f"{args.tol:g}).")
    out += [f"- {n}" for n in cell_notes(rows, names)]
    ctable = first_call_table(rows, names)
    if ctable:
        tables += ["", "First calls (ms):", "", ctable]
        out += ["", "First calls (synchronized wall time of the call that compiles):", "",
                ctable, "",
                "kiln cold: a fresh, empty KILN_CACHE_DIR (a workload's second size may reuse "
                "kernels of its first); warm: a new process with that cache filled; in brackets "
                "compile_ms from kiln.explain(). torch.compile: its first call, inductor and "
                "Triton caches "
                + ("as set in the environment" if "TORCHINDUCTOR_CACHE_DIR" in os.environ
                   else "cold") + ". Each compiling process first compiles a small unrelated "
                "function (its one-time start, 'compiler start' above), so these are the "
                "workloads' own compiles."]
    out.append(f"\ntotal {elapsed:.0f} s")
    report = "\n".join(out)
    print("\n" + report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(mode=mode, device=args.device, probes=probes, systems=metas,
                           limits=limits, notes=notes, repeats=args.repeats,
                           target_ms=args.target_ms, tol=args.tol, elapsed_s=round(elapsed, 1),
                           reference=manifest["reference"], rows=rows, report=report,
                           tables="\n".join(tables)),
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
