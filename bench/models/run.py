#!/usr/bin/env python3
"""Real models, timed as users run them: each model of this folder (written once in
PyTorch's spelling, see common.py) for kiln traced (a plain loop, automatic tracing, no
decorator), kiln eager (KILN_TRACE=0), PyTorch eager and torch.compile.

    python3 bench/models/run.py --device cpu [--only gpt,cnn] [--json out.json]
    python3 bench/models/run.py --device cuda --kiln-python /tmp/kilndeb/kiln-python3.11

Method: every (model, system) pair runs in a new worker process (this script with
--worker) with empty compile caches (KILN_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR), so the
first step and the first 10 steps are a cold start. After --warmup steps (for kiln
traced: and then until its background compiles have landed, at most 3x --warmup steps in
all or WARMUP_WAIT_S seconds; the notes say after which step each model's compile landed,
how long from the first step that took, and how slow the eager steps beside it were,
against kiln eager's median step), --repeats
loops of --steps steps are timed (synchronized at the end) and the median per-step time
is kept. Each step keeps what user code keeps (the loss read with item() every step;
the inference loop's last-position output copied to the host). kiln traced also reports,
per timed step, from kiln.explain(): trace replays, kernels, graph breaks, ops run eagerly,
and the compiles that happened after warmup (every compile counts, variants included).
Results are checked against PyTorch eager's, within the model's tolerance: the inference
output's checksum; a training model's first loss (from the same weights; the dropout masks
and batches come from each framework's own generator, so later losses drift apart) and
its last loss finite. tests/python/test_bench_models.py compares the losses step by step
with dropout off and the same batches. A kiln
traced run under KILN_VERIFY=1 (every replay also run eagerly and compared) is a separate
worker per model. What a framework lacks is reported: a model that cannot run reads
"missing: <feature>", and stand-ins the bench adds for kiln (compat.py) are listed.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from cpu_workloads import background, cpu_snapshot  # noqa: E402  (/proc/stat: others' CPU use)

BUSY = 0.25  # a time is starred when other processes used more of the CPUs than this

MODELS = {  # name -> (module, kind, tolerance of the check against PyTorch eager)
    "gpt": ("gpt", "train", 0.02),
    "cnn": ("cnn", "train", 0.10),
    "block": ("block", "infer", 1e-3),
    "lstm": ("lstm", "train", 0.02),
}
# kiln traced's warmup goes on while a background compile is in flight: to 3x --warmup
# steps, or longer while under this many seconds (short steps: a CNN step of 2.5 ms on a
# GPU is over long before a one-second NVRTC compile).
WARMUP_WAIT_S = 20.0
SYSTEMS = ("kiln_traced", "kiln_eager", "torch_eager", "torch_compile")
LABELS = {"kiln_traced": "kiln traced", "kiln_eager": "kiln eager", "torch_eager": "torch eager",
          "torch_compile": "torch.compile", "kiln_verify": "kiln KILN_VERIFY=1"}


# ---- the worker: one model under one system

def import_framework(system, device):
    if system.startswith("kiln"):
        import kiln

        return kiln, kiln.cuda.synchronize if device == "cuda" else (lambda: None)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch, torch.cuda.synchronize if device == "cuda" else (lambda: None)


def explain_snapshot(kiln):
    e = json.loads(kiln.explain().json())
    return dict(
        traces={(t["id"], t["generation"]): (t["replays"], t["kernels"], len(t["ops"]))
                for t in e["traces"]},
        breaks={(b["reason"], b["file"], b["line"]): b["count"] for b in e["graph_breaks"]},
        recompiles=len(e["recompiles"]), eager_anchors=len(e["eager_anchors"]),
        ops_recorded=e["ops_recorded"], ops_replayed=e["ops_replayed"],
        compile_ms=e["compile_ms"],
        arena_mib=[t.get("arena_bytes", 0) / 2**20 for t in e["traces"]],
        graph_notes=sorted({n for t in e["traces"] for n in t.get("notes", [])
                            if n.startswith("cuda graph off") or "staging buffers" in n}))


def tracer_stats(before, after, steps):
    """Per timed step: what the tracer did between two explain() snapshots."""
    replays = kernels = 0
    for key, (r, k, _) in after["traces"].items():
        d = r - before["traces"].get(key, (0, 0, 0))[0]
        replays += d
        kernels += d * k
    breaks = {key: n - before["breaks"].get(key, 0) for key, n in after["breaks"].items()}
    top = sorted(((n, key) for key, n in breaks.items() if n > 0), reverse=True)[:3]
    return dict(
        traces_per_step=replays / steps, kernels_per_step=kernels / steps,
        breaks_per_step=sum(breaks.values()) / steps,
        eager_ops_per_step=(after["ops_recorded"] - before["ops_recorded"]) / steps,
        replayed_ops_per_step=(after["ops_replayed"] - before["ops_replayed"]) / steps,
        compiles_after_warmup=(len(after["traces"]) - len(before["traces"])
                               + after["recompiles"] - before["recompiles"]),
        compiles=len(after["traces"]), recompiles=after["recompiles"],
        stays_eager=after["eager_anchors"], compile_ms=after["compile_ms"],
        graph_notes=after["graph_notes"], arena_mib=after["arena_mib"],
        top_breaks=[f"{n / steps:g}/step {r} at {os.path.basename(f)}:{line}"
                    for n, (r, f, line) in top])


def worker(args):
    import compat

    name, system = args.model, args.worker
    res = dict(model=name, system=system)
    try:
        fw, sync = import_framework(system, args.device)
        res["framework"] = f"{fw.__name__} {getattr(fw, '__version__', '')}".strip()
        res["stand_ins"] = compat.prepare(fw)
        if system == "torch_compile" and not hasattr(fw, "compile"):
            raise compat.Missing(f"torch {fw.__version__} has no torch.compile (needs 2.x)")
        module = __import__(MODELS[name][0])
        if args.amp and name != "gpt":
            raise compat.Missing(f"--amp is wired for gpt only, not {name}")
        case = module.make(fw, args.device, args.size, **({"amp": args.amp} if args.amp else {}))
        if system == "torch_compile":
            case.compile(fw.compile)
        traced = system in ("kiln_traced", "kiln_verify")
        # Each warmup step timed, and for kiln traced whether a background compile was in
        # flight after it: where the compile landed, and what the steps beside it cost.
        in_flight = getattr(getattr(fw, "_kiln", None), "_compiles_in_flight", None)
        warmup_ms, compiling = [], []
        t0 = time.perf_counter()
        for i in range(max(10, args.warmup)):
            ts = time.perf_counter()
            case.step()
            sync()
            warmup_ms.append((time.perf_counter() - ts) * 1e3)
            if traced and in_flight:
                compiling.append(bool(in_flight()))
            if i == 0:
                res["first_step_s"] = time.perf_counter() - t0
                res["first_value"] = case.check_value()
            if i == 9:
                res["first10_s"] = time.perf_counter() - t0
        # A JIT is warm once its compiles have landed: kiln traced warms up on until its
        # background compiles land (up to 3x the warmup steps or WARMUP_WAIT_S), and says
        # how long.
        while traced and in_flight and compiling and compiling[-1] and \
                (len(warmup_ms) < 3 * max(10, args.warmup) or
                 time.perf_counter() - t0 < WARMUP_WAIT_S):
            ts = time.perf_counter()
            case.step()
            sync()
            warmup_ms.append((time.perf_counter() - ts) * 1e3)
            compiling.append(bool(in_flight()))
        if traced and in_flight and not in_flight():
            fw.synchronize_compiles()  # nothing in flight: installs the plans that are done
        res["warmup_ms"] = warmup_ms
        res["compiling_after_step"] = compiling
        before = explain_snapshot(fw) if traced else None
        if args.device == "cuda":  # the steady state's peak: what the timed steps hold at once
            fw.cuda.reset_peak_memory_stats()
        times = []
        snap = cpu_snapshot()
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(args.steps):
                case.step()
            sync()
            times.append((time.perf_counter() - t0) / args.steps)
        if args.device == "cuda":
            res["peak_mib"] = fw.cuda.max_memory_allocated() / 2**20
        res["ms"] = statistics.median(times) * 1e3
        res["ms_all"] = [t * 1e3 for t in times]
        res["busy"] = background(snap, cpu_snapshot())
        res["value"] = case.check_value()
        if traced:
            res["tracer"] = tracer_stats(before, explain_snapshot(fw), args.steps * args.repeats)
    except Exception as e:  # the cell reads the error; the run goes on
        missing = type(e).__name__ == "Missing"
        first = str(e).splitlines()[0] if str(e) else ""
        res["error"] = ("missing: " if missing else f"{type(e).__name__}: ") + first[:200]
    print("RESULT " + json.dumps(res), flush=True)


# ---- the driver

def run_worker(python, model, system, args, deadline):
    left = deadline - time.monotonic()
    if left < 20:
        return dict(model=model, system=system, error="not run: time budget spent")
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="kiln-models-cache-")
    env["KILN_CACHE_DIR"] = cache
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    env.pop("KILN_VERIFY", None)
    if system == "kiln_eager":
        env["KILN_TRACE"] = "0"
    if system == "kiln_verify":
        env["KILN_VERIFY"] = "1"
    steps = args.steps if system != "kiln_verify" else 2
    repeats = args.repeats if system != "kiln_verify" else 1
    cmd = python.split() + [os.path.abspath(__file__), "--worker", system, "--model", model,
                            "--device", args.device, "--size", args.size, "--warmup",
                            str(args.warmup), "--steps", str(steps), "--repeats", str(repeats),
                           "--amp", args.amp]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                           timeout=min(args.timeout, left - 10))
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = "timeout"
    subprocess.run(["rm", "-rf", cache])
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return dict(model=model, system=system, error=f"worker died: {tail[:200]}")


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def check(res, ref, kind, tol):
    """Inference: the last output's checksum against PyTorch eager's. Training: the first
    step's loss (same weights; only the dropout masks and batch draws differ) against
    PyTorch eager's, and the last loss finite (the exact comparison, dropout off and the
    same batches, is tests/python/test_bench_models.py)."""
    key = "value" if kind == "infer" else "first_value"
    if key not in res or ref is None or key not in ref:
        return "-"
    a, b = res[key], ref[key]
    rel = abs(a - b) / max(abs(b), 1e-12)
    if kind == "train" and not math.isfinite(res["value"]):
        return f"MISMATCH: loss {res['value']} after the timed steps"
    return f"ok ({rel:.1e})" if rel <= tol else f"MISMATCH {a:.6g} vs {b:.6g}"


def table(results, args):
    amp = f", forward under autocast {args.amp}" if args.amp else ""
    lines = [f"bench/models, device {args.device}, size {args.size}{amp}: ms per step = median of "
             f"{args.repeats} x {args.steps} steps after {args.warmup} warmup steps; cold "
             "compile caches; 'vs torch' = torch eager ms / this ms (>1: faster than PyTorch "
             "eager); tracer columns per timed step (kiln traced only); compiles = every "
             "compile after warmup (variants included), recompiles in all; * = other processes "
             f"used over {BUSY:.0%} of the CPUs while it was timed", "",
             "| model | system | ms/step | vs torch | first step s | first 10 s | compiles "
             "after warmup | recompiles | traces/step | kernels/step | breaks/step | eager "
             "ops/step | peak MiB | check |", "|" + "---|" * 14]
    notes = []
    for model in dict.fromkeys(r["model"] for r in results):
        rows = {r["system"]: r for r in results if r["model"] == model}
        ref = rows.get("torch_eager")
        kind, tol = MODELS[model][1:]
        for system, r in rows.items():
            if system == "kiln_verify":
                continue
            if "error" in r:
                lines.append(f"| {model} | {LABELS[system]} | {r['error']} |" + " |" * 12)
                continue
            t = r.get("tracer") or {}
            ratio = ref["ms"] / r["ms"] if ref and "ms" in ref else None
            comp = t.get("compiles_after_warmup", "-")
            star = "*" if (r.get("busy") or 0) > BUSY else ""
            lines.append(
                f"| {model} | {LABELS[system]} | {r['ms']:.2f}{star} | {fmt(ratio, '.2f')} | "
                f"{r['first_step_s']:.2f} | {r['first10_s']:.2f} | {comp} | "
                f"{t.get('recompiles', '-')} | {fmt(t.get('traces_per_step'), '.1f')} | "
                f"{fmt(t.get('kernels_per_step'), '.0f')} | {fmt(t.get('breaks_per_step'), '.1f')} | "
                f"{fmt(t.get('eager_ops_per_step'), '.0f')} | {fmt(r.get('peak_mib'), '.0f')} | "
                f"{check(r, ref, kind, tol)} |")
            if t.get("arena_mib"):
                notes.append(f"{model}, {LABELS[system]}: arenas of its traces (MiB): " +
                             ", ".join(f"{a:.0f}" for a in t["arena_mib"]) +
                             (" (on the GPU one arena, the largest, serves them all)"
                              if args.device == "cuda" else ""))
            if t.get("compile_ms") is not None:
                notes.append(f"{model}, {LABELS[system]}: {t['compile_ms'] / 1e3:.2f} s "
                             f"compiling in all, {t['compiles']} compiled traces")
            for b in t.get("top_breaks", []):
                notes.append(f"{model}, {LABELS[system]}: graph break {b}")
            for n in t.get("graph_notes", []):
                notes.append(f"{model}, {LABELS[system]}: {n}")
            if t.get("stays_eager"):
                notes.append(f"{model}, {LABELS[system]}: {t['stays_eager']} trace anchor(s) "
                             "left eager (recompile limit)")
        if "peak_mib" in rows.get("kiln_traced", {}) and ref and "peak_mib" in ref:
            notes.append(f"{model}: kiln traced's peak memory is "
                         f"{rows['kiln_traced']['peak_mib'] / ref['peak_mib']:.2f}x PyTorch "
                         "eager's (max_memory_allocated over the timed steps)")
        tr, ea = rows.get("kiln_traced", {}), rows.get("kiln_eager", {})
        busy_steps = [i for i, c in enumerate(tr.get("compiling_after_step", [])) if c]
        if busy_steps and "ms" in ea:
            # A step overlapped the compile if it was in flight after the step before it.
            during = [tr["warmup_ms"][i] for i in range(busy_steps[0], busy_steps[-1] + 2)
                      if i < len(tr["warmup_ms"])]
            landed = busy_steps[-1] + 1
            when = (f"landed before step {landed}" if landed < len(tr["warmup_ms"])
                    else "still in flight after the last")
            if landed < len(tr["warmup_ms"]):  # the first step at full speed included
                when += f", {sum(tr['warmup_ms'][:landed + 1]) / 1e3:.2f} s from the first step"
            notes.append(f"{model}: kiln traced's background compile was in flight after "
                         f"steps {busy_steps[0]}-{busy_steps[-1]} of {len(tr['warmup_ms'])} "
                         f"warmup steps ({when}); "
                         f"steps beside it {min(during):.1f}-{max(during):.1f} ms, at most "
                         f"{max(during) / ea['ms']:.2f}x kiln eager's median step")
        if "ms" in tr and "ms" in ea:
            notes.append(f"{model}: kiln traced is {ea['ms'] / tr['ms']:.2f}x kiln eager "
                         "(>1: faster)")
        v = rows.get("kiln_verify")
        if v:
            notes.append(f"{model}: KILN_VERIFY=1 run: " +
                         ("ok (every replay matched eager)" if "error" not in v else v["error"]))
    for s in dict.fromkeys(x for r in results for x in r.get("stand_ins", [])):
        notes.append(f"stand-in: {s}")
    for r in results:
        if r.get("framework") and r["system"] in ("torch_eager", "kiln_traced"):
            notes.append(f"{LABELS[r['system']]} ran {r['framework']}")
    return "\n".join(lines + [""] + [f"- {n}" for n in dict.fromkeys(notes)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--size", default="", help="cpu or gpu (default: the device's)")
    ap.add_argument("--only", default="", help="comma-separated models: " + ",".join(MODELS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--no-verify", action="store_true", help="skip the KILN_VERIFY=1 runs")
    ap.add_argument("--kiln-python", default=os.environ.get("KILN_PYTHON", sys.executable))
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--amp", default="", choices=("", "bf16", "fp16"),
                    help="gpt's forward under autocast to this dtype (fp32 weights)")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per worker")
    ap.add_argument("--budget", type=int, default=3600, help="seconds for the whole run")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", default="")
    ap.add_argument("--model", default="")
    args = ap.parse_args()
    args.size = args.size or ("gpu" if args.device == "cuda" else "cpu")
    args.warmup = max(args.warmup, 10)
    if args.worker:
        worker(args)
        return
    deadline = time.monotonic() + args.budget
    models = [m for m in MODELS if not args.only or m in args.only.split(",")]
    systems = args.systems.split(",") + ([] if args.no_verify else ["kiln_verify"])
    results = []
    for model in models:
        for system in systems:
            python = args.kiln_python if system.startswith("kiln") else args.torch_python
            r = run_worker(python, model, system, args, deadline)
            print(f"[models] {model} {system}: " + (r.get("error") or f"{r['ms']:.2f} ms/step"),
                  file=sys.stderr, flush=True)
            results.append(r)
    text = table(results, args)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=args.device, size=args.size, results=results, table=text), f,
                      indent=1)


if __name__ == "__main__":
    main()
